"""The two-node Slurm cluster (n1, n2) these tests run on, started once per session."""

from tests.support.slurm import slurm_cluster

__all__ = ["slurm_cluster"]
