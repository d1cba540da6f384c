"""ExperimentSpec -> Plan: names, ranks, per-attribute overrides, processes, and the filled command."""

from __future__ import annotations

import pytest

from phalanx.domain import Framework, Range, Resources, Role
from phalanx.errors import SpecError
from phalanx.plan import build_plan, command_argv, placeholders, render_command
from phalanx.spec.model import ExperimentSpec, ReplicaTemplate, Topology

GPU = Resources(gpu=Range(1, 1))
CPU = Resources(cpu=Range(1, 2))


def spec(**kw: object) -> ExperimentSpec:
    return ExperimentSpec(version=1, kind="experiment", command=("python x.py",), **kw)  # type: ignore[arg-type]


def test_master_is_rank_0_workers_follow_and_ps_take_no_rank() -> None:
    plan = build_plan(spec(framework=Framework.TENSORFLOW, topology=Topology(n_workers=2, n_ps=2)))
    assert [(r.name, r.role, r.index, r.rank) for r in plan.replicas] == [
        ("master", Role.MASTER, 0, 0),
        ("worker-0", Role.WORKER, 0, 1),
        ("worker-1", Role.WORKER, 1, 2),
        ("ps-0", Role.PS, 0, None),
        ("ps-1", Role.PS, 1, None),
    ]
    assert plan.topology() == {"master": 1, "worker": 2, "ps": 2}
    assert plan.world_size == 3


def test_an_index_override_replaces_the_default_attribute_by_attribute() -> None:
    default = ReplicaTemplate(resources=GPU, node_selector={"pool": "gpu"})
    topo = Topology(
        n_workers=3,
        default_worker=default,
        worker={1: ReplicaTemplate(resources=CPU), 2: ReplicaTemplate(node_selector={"pool": "big"})},
    )
    plan = build_plan(spec(framework=Framework.PYTORCH, topology=topo))
    assert plan.replica("worker-0").resources == GPU
    assert plan.replica("worker-1").resources == CPU  # replaced whole: no gpu
    assert plan.replica("worker-1").node_selector == {"pool": "gpu"}  # not overridden: the default
    assert plan.replica("worker-2").resources == GPU
    assert plan.replica("worker-2").node_selector == {"pool": "big"}


def test_the_master_takes_only_the_top_level_template() -> None:
    plan = build_plan(spec(master=ReplicaTemplate(resources=CPU), topology=Topology(n_workers=1)))
    assert plan.replica("master").resources == CPU
    assert plan.replica("worker-0").resources == Resources()


def test_processes_per_replica_multiply_the_world_but_not_the_ps() -> None:
    plan = build_plan(
        spec(framework=Framework.TENSORFLOW, topology=Topology(n_workers=1, n_ps=1, processes_per_replica=4))
    )
    assert [r.processes for r in plan.replicas] == [4, 4, 1]
    assert plan.world_size == 8


def test_command_is_filled_from_params_and_joined_in_sequence() -> None:
    assert render_command(("a {{ x }}", "b {{y}}"), {"x": 1, "y": False}) == "a 1 && b false"
    assert placeholders("a {{ x }} {{y}}") == ["x", "y"]
    assert command_argv("a && b") == ["/bin/sh", "-c", "a && b"]


def test_a_python_built_spec_with_an_unknown_placeholder_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"unknown placeholder \{\{ lr \}\}"):
        build_plan(ExperimentSpec(version=1, kind="experiment", command=("python x.py --lr={{ lr }}",)))


def test_plan_json_has_the_documented_shape() -> None:
    doc = build_plan(spec(framework=Framework.PYTORCH, topology=Topology(n_workers=1))).to_json()
    assert doc["framework"] == "pytorch" and doc["backend"] is None and doc["command"] == "python x.py"
    worker = doc["replicas"][1]
    assert {k: worker[k] for k in ("name", "role", "index", "rank")} == {
        "name": "worker-0",
        "role": "worker",
        "index": 0,
        "rank": 1,
    }
    assert worker["resources"] == {
        "cpu": {"requests": None, "limits": None},
        "memory": {"requests": None, "limits": None},
        "gpu": {"requests": None, "limits": None},
    }


def test_an_empty_param_standing_alone_renders_as_nothing_but_stays_quoted_elsewhere() -> None:
    cmd = ("python t.py {{ e }} --x={{ e }} \"{{ e }}\" '{{ e }}' {{ e }}",)
    assert render_command(cmd, {"e": ""}) == "python t.py  --x='' \"\" '' "
    assert render_command(("python t.py {{ e }}",), {"e": "a b"}) == "python t.py 'a b'"
