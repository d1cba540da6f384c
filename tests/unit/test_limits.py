"""Resources on this machine: what fits is given CPUs, memory caps and GPUs; what does not is refused."""

from __future__ import annotations

import pytest

from phalanx.domain import Range, Resources
from phalanx.errors import UsageError
from phalanx.machine.limits import Machine, allocate, limit_env
from phalanx.machine.proctree import memory_exceeded_reason

TWO_CORES = Machine(cpus=(0, 1), memory_mib=4096, gpus=())


def res(
    cpu: float | None = None,
    cpu_limit: float | None = None,
    mem: float | None = None,
    gpu: float | None = None,
) -> Resources:
    return Resources(cpu=Range(cpu, cpu_limit), memory=Range(None, mem), gpu=Range(gpu, None))


def test_cpu_limits_become_disjoint_affinity_sets_and_thread_counts() -> None:
    got = allocate([("master", res(1, 1), 1), ("worker-0", res(1, 1), 1)], TWO_CORES)
    assert got["master"].cpus == (0,) and got["worker-0"].cpus == (1,)
    assert got["master"].threads == 1
    assert limit_env(got["master"], {}) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert limit_env(got["master"], {"OMP_NUM_THREADS": "4"}) == {"MKL_NUM_THREADS": "1"}


def test_more_cores_than_the_machine_has_is_refused_unless_oversubscribed() -> None:
    replicas = [(f"worker-{i}", res(1, 2), 1) for i in range(3)]
    with pytest.raises(UsageError, match="--oversubscribe"):
        allocate(replicas, TWO_CORES)
    assert len(allocate(replicas, TWO_CORES, oversubscribe=True)) == 3


def test_more_memory_than_the_machine_has_is_refused() -> None:
    with pytest.raises(UsageError, match="MiB"):
        allocate([("master", res(mem=8192), 1)], TWO_CORES)


def test_gpus_are_disjoint_and_a_missing_gpu_is_refused_even_when_oversubscribing() -> None:
    with pytest.raises(UsageError, match="GPU"):
        allocate([("master", res(gpu=1), 1)], TWO_CORES, oversubscribe=True)
    four = Machine(cpus=(0, 1), memory_mib=4096, gpus=("0", "1", "2", "3"))
    got = allocate([("master", res(gpu=1), 1), ("worker-0", res(gpu=2), 1)], four)
    assert got["master"].gpus == ("0",) and got["worker-0"].gpus == ("1", "2")
    assert limit_env(got["worker-0"], {})["CUDA_VISIBLE_DEVICES"] == "1,2"


def test_in_a_gpu_experiment_a_replica_without_a_gpu_request_sees_no_gpu() -> None:
    two = Machine(cpus=(0, 1), memory_mib=4096, gpus=("0", "1"))
    got = allocate([("master", res(gpu=1), 1), ("worker-0", res(), 1)], two)
    assert limit_env(got["master"], {})["CUDA_VISIBLE_DEVICES"] == "0"
    assert limit_env(got["worker-0"], {})["CUDA_VISIBLE_DEVICES"] == ""
    # an experiment that asks for no GPU leaves the user's devices alone
    plain = allocate([("master", res(), 1)], two)
    assert "CUDA_VISIBLE_DEVICES" not in limit_env(plain["master"], {})


def test_the_memory_reason_uses_the_files_unit() -> None:
    assert memory_exceeded_reason(1024) == "memory limit 1024Mi exceeded"
