"""Data in: datastores (named places holding data), versioned datasets, and the inputs an experiment
reads (resolved before anything starts, fetched once per machine). See docs/data.md."""

from phalanx.data.handles import Dataset, Datastore
from phalanx.spec.inputs import InputSpec

__all__ = ["Dataset", "Datastore", "InputSpec"]
