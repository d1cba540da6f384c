"""Every example of the seed documents (000-002) loads to the topology its text describes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from phalanx.domain import BackendKind, Framework, Range, Resources, Role
from phalanx.errors import SpecError
from phalanx.plan import build_plan
from phalanx.spec.loader import load_spec
from phalanx.spec.model import ExperimentSpec

FIXTURES = Path(__file__).parent / "fixtures"

MASTER = Resources(cpu=Range(1, 2), memory=Range(256, 1024), gpu=Range(1, 1))
WORKER_2 = Resources(cpu=Range(1, 2), memory=Range(256, 1024))  # no gpu: the override replaces
PS_DEFAULT = Resources(cpu=Range(1, 1), memory=Range(256, 256))
PS_0 = Resources(cpu=Range(1, 1), memory=Range(512, 512))


def load(name: str) -> ExperimentSpec:
    return load_spec(FIXTURES / name)


def comparable(spec: ExperimentSpec) -> ExperimentSpec:
    return replace(spec, source_file=None, source_text=None)


def test_seed002_large_example_is_one_master_seven_workers_three_ps() -> None:
    plan = build_plan(load("seed002_tensorflow_large.yml"))
    assert plan.framework is Framework.TENSORFLOW
    assert plan.topology() == {"master": 1, "worker": 7, "ps": 3}
    by_name = {r.name: r for r in plan.replicas}
    assert by_name["master"].resources == MASTER
    assert by_name["master"].rank == 0
    assert by_name["worker-2"].resources == WORKER_2
    assert by_name["worker-2"].resources.gpu == Range(None, None)
    assert by_name["worker-2"].rank == 3
    for i in (0, 1, 3, 4, 5, 6):
        assert by_name[f"worker-{i}"].resources == MASTER  # the default worker equals the master here
        assert by_name[f"worker-{i}"].rank == i + 1
    assert by_name["ps-0"].resources == PS_0
    assert by_name["ps-1"].resources == by_name["ps-2"].resources == PS_DEFAULT
    assert all(r.rank is None for r in plan.replicas if r.role is Role.PS)


def test_seed000_large_example_is_one_master_seven_workers_and_worker_2_has_no_gpu() -> None:
    plan = build_plan(load("seed000_pytorch_large.yml"))
    assert plan.framework is Framework.PYTORCH
    assert plan.topology() == {"master": 1, "worker": 7, "ps": 0}
    assert plan.replica("worker-2").resources == WORKER_2
    assert plan.replica("worker-6").resources.gpu == Range(1, 1)


@pytest.mark.parametrize(
    ("name", "framework", "counts"),
    [
        ("seed000_pytorch_master.yml", Framework.PYTORCH, (1, 0, 0)),
        ("seed000_pytorch_3_workers.yml", Framework.PYTORCH, (1, 3, 0)),
        ("seed000_kubeflow.yml", Framework.PYTORCH, (1, 1, 0)),
        ("seed001_tensorflow_section.yml", Framework.TENSORFLOW, (1, 3, 1)),
        ("seed001_mxnet_section.yml", Framework.MXNET, (1, 3, 1)),
        ("seed001_pytorch_section.yml", Framework.PYTORCH, (1, 3, 0)),
        ("seed001_tensorflow_large.yml", Framework.TENSORFLOW, (1, 7, 3)),
        ("seed002_tensorflow_master.yml", Framework.TENSORFLOW, (1, 0, 0)),
        ("seed002_tensorflow_3_workers.yml", Framework.TENSORFLOW, (1, 3, 1)),
        ("seed002_kubeflow.yml", Framework.TENSORFLOW, (1, 2, 1)),
    ],
)
def test_each_seed_example_expands_to_the_topology_its_text_describes(
    name: str, framework: Framework, counts: tuple[int, int, int]
) -> None:
    plan = build_plan(load(name))
    assert plan.framework is framework
    assert (plan.topology()["master"], plan.topology()["worker"], plan.topology()["ps"]) == counts


def test_master_resources_belong_to_the_master_only() -> None:
    plan = build_plan(load("seed000_pytorch_master.yml"))
    assert [r.name for r in plan.replicas] == ["master"]
    assert plan.replicas[0].resources == MASTER


def test_the_backend_key_selects_kubeflow() -> None:
    assert load("seed000_kubeflow.yml").backend is BackendKind.KUBEFLOW
    assert load("seed002_kubeflow.yml").backend is BackendKind.KUBEFLOW
    assert load("seed000_pytorch_3_workers.yml").backend is None  # native is the default


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("seed001_tensorflow_large.yml", "seed002_tensorflow_large.yml"),
        ("seed001_tensorflow_section.yml", "seed002_tensorflow_3_workers.yml"),
        ("seed001_pytorch_section.yml", "seed000_pytorch_3_workers.yml"),
        ("seed000_pytorch_large_variant_keys.yml", "seed000_pytorch_large.yml"),
    ],
)
def test_both_layouts_load_to_the_same_spec(older: str, newer: str) -> None:
    assert comparable(load(older)) == comparable(load(newer))


def test_seed000_pytroch_typo_is_answered_with_the_right_word() -> None:
    with pytest.raises(SpecError) as err:
        load("seed000_pytroch_typo.yml")
    (problem,) = err.value.problems
    assert (problem.line, problem.column, problem.path) == (4, 12, "framework")
    assert problem.message.startswith("unknown framework 'pytroch'; did you mean 'pytorch'?")


def test_seed001_request_typo_is_answered_with_the_right_word() -> None:
    with pytest.raises(SpecError) as err:
        load("seed001_master_request_typo.yml")
    (problem,) = err.value.problems
    assert str(problem).endswith(
        "seed001_master_request_typo.yml:13:7: environment.resources.gpu.request: "
        "unknown key; did you mean 'requests'? (allowed here: requests, limits)"
    )


def test_seed001_large_example_verbatim_reports_both_typos_in_file_order() -> None:
    with pytest.raises(SpecError) as err:
        load("seed001_tensorflow_large_request_typo.yml")
    assert [(p.line, p.path) for p in err.value.problems] == [
        (14, "environment.resources.gpu.request"),
        (30, "environment.tensorflow.default_worker.resources.gpu.request"),
    ]
