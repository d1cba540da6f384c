"""The two-node Slurm cluster a server's boxed Slurm job runs on (started once per session)."""

from tests.support.slurm import slurm_cluster

__all__ = ["slurm_cluster"]
