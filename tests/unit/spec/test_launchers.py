"""A launcher in run.cmd of a `framework: pytorch` experiment gets the replicas' rendezvous: the
flags go right after its name and read each replica's own variables, a command without a launcher
(or without the framework) is left alone, and what would launch twice or fight the wiring is refused."""

from __future__ import annotations

import pytest

from phalanx.domain import Framework
from phalanx.errors import SpecError
from phalanx.plan import build_plan
from phalanx.spec.model import ExperimentSpec, Topology

NODE = '"${NODE_RANK:-$PET_NODE_RANK}"'
TORCHRUN = f'--nnodes=3 --node_rank={NODE} --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT"'


def plan_of(cmd: str, framework: Framework | None = Framework.PYTORCH, procs: int = 1):  # type: ignore[no-untyped-def]
    topology = Topology(n_workers=2, processes_per_replica=procs)
    spec = ExperimentSpec(
        version=1, kind="experiment", command=(cmd,), framework=framework, topology=topology
    )
    return build_plan(spec)


@pytest.mark.parametrize(
    ("cmd", "wired"),
    [
        (
            "torchrun --nproc_per_node=2 train.py --lr 1",
            f"torchrun {TORCHRUN} --nproc_per_node=2 train.py --lr 1",
        ),
        ("python -m torch.distributed.run train.py", f"python -m torch.distributed.run {TORCHRUN} train.py"),
        (
            "cd src && OMP_NUM_THREADS=1 torchrun -m pkg.train",
            f"cd src && OMP_NUM_THREADS=1 torchrun {TORCHRUN} -m pkg.train",
        ),
        # the script's own --master_port is the script's business
        ("torchrun train.py --master_port 5", f"torchrun {TORCHRUN} train.py --master_port 5"),
    ],
)
def test_torchrun_gets_the_replicas_rendezvous(cmd: str, wired: str) -> None:
    plan = plan_of(cmd)
    assert plan.command == wired
    assert [r.processes for r in plan.replicas] == [1, 1, 1]  # one launcher per replica
    assert plan.notes and "one launcher per replica" in plan.notes[0]


def test_accelerate_launch_gets_machines_and_one_process_each_unless_told() -> None:
    machines = (
        f'--num_machines=3 --machine_rank={NODE} --main_process_ip="$MASTER_ADDR" '
        '--main_process_port="$MASTER_PORT"'
    )
    assert plan_of("accelerate launch --cpu train.py").command == (
        f"accelerate launch {machines} --num_processes=3 --cpu train.py"
    )
    assert plan_of("accelerate launch --num_processes 6 train.py").command == (
        f"accelerate launch {machines} --num_processes 6 train.py"
    )
    with pytest.raises(SpecError, match="--num_processes=4 must be a multiple of the 3 replicas"):
        plan_of("accelerate launch --num_processes=4 train.py")


def test_commands_without_a_launcher_or_the_framework_are_left_alone() -> None:
    assert plan_of("python train.py --torchrun").command == "python train.py --torchrun"
    assert plan_of("echo torchrun").command == "echo torchrun"
    plain = plan_of("torchrun --standalone --nproc_per_node=2 train.py", framework=None)
    assert plain.command == "torchrun --standalone --nproc_per_node=2 train.py"
    assert plain.notes == ()


def test_a_double_launch_or_a_rendezvous_written_in_the_command_is_refused() -> None:
    with pytest.raises(SpecError, match="processes_per_replica: 2 would start torchrun 2 times") as err:
        plan_of("torchrun train.py", procs=2)
    assert "give torchrun --nproc_per_node" in str(err.value)
    with pytest.raises(SpecError, match=r"torchrun's --master_port comes from each replica's wiring"):
        plan_of("torchrun --master-port=29500 train.py")
    with pytest.raises(SpecError, match=r"--standalone"):
        plan_of("torchrun --standalone train.py")
    with pytest.raises(SpecError, match=r"accelerate launch's --machine_rank"):
        plan_of("accelerate launch --machine_rank 0 train.py")
