"""The Ray engine without a cluster: what the file's resources become (bundles, strategy), what is
refused and why, the waiting reason in the cluster's numbers, and how an actor's report maps to a
replica's state. The engine imports Ray only to talk to a cluster, so none of this needs Ray."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from phalanx.backends.base import LaunchContext
from phalanx.backends.ray import RayBackend, replica_status
from phalanx.backends.ray_render import bundle, strategy, unfit_reason
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import BackendKind, Framework, Range, ReplicaState, Resources
from phalanx.errors import MissingExtra, SpecError, UsageError
from phalanx.machine.box import Isolation
from phalanx.plan import Plan, build_plan
from phalanx.spec.model import ExperimentSpec, ReplicaTemplate, Topology

POOL = Cluster(name="pool", kind="ray", address="head:6379", server_url="http://head:8000")
CONTEXT = LaunchContext("abc123def456", "/work/exp", "/usr/bin/python3", {"PHALANX_HOME": "/home/u/.phalanx"})


def plan(**kw: object) -> Plan:
    return build_plan(ExperimentSpec(version=1, kind="experiment", command=("python t.py",), **kw))  # type: ignore[arg-type]


def test_bundles_hold_the_files_requests_in_rays_units_and_a_core_at_least() -> None:
    p = plan(
        framework=Framework.PYTORCH,
        master=ReplicaTemplate(resources=Resources(Range(2, 4), Range(None, 512), Range(1, 1))),
        topology=Topology(n_workers=1),
    )
    assert [bundle(r) for r in p.replicas] == [{"CPU": 2, "GPU": 1, "memory": 512 * 2**20}, {"CPU": 1}]
    assert strategy(p) == "PACK"
    spread = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}
    p = plan(
        framework=Framework.PYTORCH,
        master=ReplicaTemplate(affinity=spread),
        topology=Topology(n_workers=1, default_worker=ReplicaTemplate(affinity=spread)),
    )
    assert strategy(p) == "STRICT_SPREAD"


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"framework": Framework.HOROVOD, "topology": Topology(n_workers=1)}, "over ssh"),
        ({"backend": BackendKind.MPI, "framework": Framework.PYTORCH}, "over ssh"),
        ({"master": ReplicaTemplate(node_selector={"pool": "gpu"})}, "master: node_selector"),
    ],
)
def test_what_a_placement_group_cannot_express_is_refused_before_anything_is_created(
    kw: dict[str, object], said: str
) -> None:
    with pytest.raises(SpecError, match=said):
        RayBackend(Settings(), POOL).dry_run(plan(**kw), CONTEXT)


def test_a_ray_cluster_without_a_server_is_refused_with_how_to_register_one() -> None:
    with pytest.raises(SpecError, match="--kind ray --address HEAD:6379 --server-url"):
        RayBackend(Settings(), Cluster(name="p", kind="ray", address="h:1")).dry_run(plan(), CONTEXT)


def test_the_dry_run_shows_the_wiring_with_placeholders_and_never_the_token() -> None:
    backend = RayBackend(Settings(token="server-secret"), POOL)
    dry = backend.dry_run(plan(framework=Framework.PYTORCH, topology=Topology(n_workers=1)), CONTEXT)
    shown = json.loads(dry.render())
    env = shown["actors"][1]["processes"][0]["env"]
    assert env["MASTER_ADDR"] == "@@ADDR0@@" and env["RANK"] == "1" and env["WORLD_SIZE"] == "2"
    assert env["PHALANX_HOST"] == "http://head:8000" and "PHALANX_HOME" not in env
    assert "server-secret" not in dry.render() and env["PHALANX_TOKEN"].startswith("<the experiment")
    sent = dry.native["actors"][1]["processes"][0]["env"]["PHALANX_TOKEN"]
    assert sent.startswith("phx-exp.abc123def456.")  # what the actor gets: this experiment only
    assert shown["placement_group"]["name"] == "phalanx-abc123def456-0"


def test_the_waiting_reason_says_what_the_gang_needs_and_what_the_cluster_has() -> None:
    nodes = [{"CPU": 1.0, "memory": 2.0**30}, {"CPU": 1.0, "memory": 2.0**30}]
    three = ({"CPU": 1}, {"CPU": 1}, {"CPU": 1})
    assert unfit_reason(three, "STRICT_SPREAD", nodes) == (
        "needs 3 x {CPU: 1} spread over 3 nodes; the cluster has 2"
    )
    said = unfit_reason(({"CPU": 2, "GPU": 1}, {"CPU": 1}), "PACK", nodes)
    assert said.startswith("needs 1 x {CPU: 2, GPU: 1} + 1 x {CPU: 1} ({CPU: 3, GPU: 1} in all);")
    assert "the cluster has {CPU: 2, GPU: 0} on 2 node(s)" in said


@pytest.mark.parametrize(
    ("report", "state", "reason"),
    [
        ({"phase": "placed"}, ReplicaState.STARTING, None),
        ({"phase": "preparing"}, ReplicaState.STARTING, None),
        ({"phase": "running", "pid": 7}, ReplicaState.RUNNING, None),
        ({"phase": "ended", "exit_code": 0}, ReplicaState.SUCCEEDED, None),
        ({"phase": "ended", "exit_code": 3}, ReplicaState.FAILED, "exited with code 3"),
        ({"phase": "ended", "signal": 9, "exit_code": None}, ReplicaState.FAILED, "was killed by SIGKILL"),
        ({"phase": "ended", "signal": 15, "reason": "stopped"}, ReplicaState.STOPPED, "stopped"),
        (
            {"phase": "ended", "exit_code": 2, "reason": "could not start on its node: no code"},
            ReplicaState.FAILED,
            "could not start on its node: no code",
        ),
        ({"phase": "rebooting"}, ReplicaState.UNKNOWN, None),
    ],
)
def test_an_actors_report_maps_through_one_table(
    report: dict[str, object], state: ReplicaState, reason: str | None
) -> None:
    got = replica_status("worker-0", report, "10.0.0.2")
    assert (got.state, got.reason) == (state, reason)


def test_without_ray_installed_the_engine_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where it is not installed
    backend = RayBackend(Settings(), POOL)
    backend.dry_run(plan(), CONTEXT)  # the dry run needs no Ray
    with pytest.raises(MissingExtra, match=r"pip install 'phalanx\[ray\]'"):
        backend.describe("phalanx-abc123def456-0/master")


def test_a_servers_boxed_experiment_is_refused_saying_where_it_can_run() -> None:
    """Ray runs every job as its daemons' account: a project's job there would not be boxed."""
    boxed = replace(CONTEXT, isolation=Isolation("phx-nlp", 1234, 1234, "nlp", "http://127.0.0.1:9"))
    with pytest.raises(UsageError, match=r"cannot run a server's boxed experiment.*Slurm or Kubernetes"):
        RayBackend(Settings(), POOL).dry_run(plan(), boxed)
