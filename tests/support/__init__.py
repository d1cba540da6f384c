"""Test support: fakes of parts that cannot run here (the Kubernetes API server) and launchers of the real
parts the tests start (PostgreSQL, the local Slurm cluster). Test code only: it is not in the wheel."""
