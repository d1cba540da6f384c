"""What a service is of: an experiment, a group's trials or a project (no TensorBoard needed here)."""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.domain import Experiment, ExperimentFilter
from phalanx.store.base import Store

# the most experiments one board shows (a project's newest): TensorBoard's run list stays usable
MAX_RUNS = 200


@dataclass(frozen=True)
class Target:
    """What a service is of: ``kind`` experiment, group or project, and its id (a project's name)."""

    kind: str
    id: str

    def experiments(self, store: Store) -> list[Experiment]:
        """The experiments it covers today, newest first (a group gains trials as it runs)."""
        if self.kind == "experiment":
            return [store.get_experiment(self.id)]
        query = (
            ExperimentFilter(group_id=self.id, limit=MAX_RUNS)
            if self.kind == "group"
            else ExperimentFilter(project=self.id, limit=MAX_RUNS)
        )
        return list(store.list_experiments(query).items)
