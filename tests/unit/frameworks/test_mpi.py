"""MPI wiring: one mpirun over every slot; the rank wrapper maps OMPI_* to torch's and Phalanx's names."""

from __future__ import annotations

from phalanx.domain import BackendKind, Framework
from phalanx.frameworks import mpi, uses_mpi

from .conftest import endpoints, make_plan


def test_horovod_and_backend_mpi_launch_through_mpirun() -> None:
    assert uses_mpi(make_plan(Framework.HOROVOD))
    assert uses_mpi(make_plan(Framework.PYTORCH, backend=BackendKind.MPI))
    assert not uses_mpi(make_plan(Framework.PYTORCH))


def test_the_launcher_covers_every_process_of_master_and_workers() -> None:
    plan = make_plan(Framework.HOROVOD, workers=2, processes=2)
    argv = mpi.launcher_argv(plan)
    assert argv[:3] == ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    assert argv[argv.index("-np") + 1] == "6"
    env = mpi.launcher_env(plan, endpoints(plan), "python train.py")
    assert env[mpi.COMMAND_VAR] == "python train.py" and env["PHALANX_PROCESSES"] == "2"


def test_parameter_servers_cannot_be_expressed_in_mpi() -> None:
    assert mpi.check(make_plan(Framework.HOROVOD, ps=1))
    assert not mpi.check(make_plan(Framework.HOROVOD))
