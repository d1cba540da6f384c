"""The Kubernetes engine: what it renders (validated against Kubernetes' schemas) and how its
controller drives pods, against FakeKubernetesAPI (no API server can run here)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from phalanx.backends.kube_objects import PLACEHOLDER_UID, validate_core
from phalanx.backends.kubernetes import KubernetesBackend, pod_status
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework, ReplicaState
from phalanx.errors import BackendUnavailable, SpecError
from phalanx.spec.model import ReplicaTemplate
from tests.support.fake_kube import FakeKubernetesAPI
from tests.unit.backends.conftest import EXPERIMENT_ID, SERVER, CodeShelf, context, plan, resources

NS = "ml"
POD = f"phx-{EXPERIMENT_ID}"


def backend(api: FakeKubernetesAPI | None = None, **cluster: str) -> KubernetesBackend:
    return KubernetesBackend(
        Settings(home="/tmp/h"),
        Cluster(name="k", kind="kubernetes", **{"server_url": SERVER, "namespace": NS, **cluster}),
        api=api,
        put_code=CodeShelf(),
    )


def objects(p, **cluster: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return (
        backend(**cluster).dry_run(p, context(PHALANX_HOME="/tmp/h", PHALANX_SPOOL="/tmp/h/spool/x")).native
    )


def by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


# -- render -----------------------------------------------------------------------------------
def test_one_pod_per_replica_owned_by_the_configmap_that_holds_the_plan() -> None:
    objs = objects(plan(workers=2))
    assert objs[0]["kind"] == "ConfigMap"
    pods = by_kind(objs, "Pod")
    assert sorted(pods) == [f"{POD}-master", f"{POD}-worker-0", f"{POD}-worker-1"]
    for pod in pods.values():
        assert pod["spec"]["restartPolicy"] == "Never"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ConfigMap"
        assert pod["metadata"]["labels"]["phalanx.dev/experiment"] == EXPERIMENT_ID
    assert '"worker-1"' in by_kind(objs, "ConfigMap")[POD]["data"]["plan.json"]


def test_pytorch_gets_one_service_for_the_master_address() -> None:
    objs = objects(plan(workers=2))
    assert list(by_kind(objs, "Service")) == [f"{POD}-master"]
    svc = by_kind(objs, "Service")[f"{POD}-master"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"]["phalanx.dev/replica"] == "master"
    env = env_of(by_kind(objs, "Pod")[f"{POD}-worker-1"])
    assert env["MASTER_ADDR"] == f"{POD}-master.{NS}.svc"
    assert (env["RANK"], env["WORLD_SIZE"], env["PHALANX_REPLICA"]) == ("2", "3", "worker-1")


def test_tensorflow_and_mxnet_get_a_service_for_every_host_they_name() -> None:
    tf = objects(plan(framework=Framework.TENSORFLOW, workers=1, ps=1))
    assert len(by_kind(tf, "Service")) == 3
    assert f"{POD}-ps-0.{NS}.svc:2222" in env_of(by_kind(tf, "Pod")[f"{POD}-master"])["TF_CONFIG"]
    mx = objects(plan(framework=Framework.MXNET, workers=1, ps=1))
    assert env_of(by_kind(mx, "Pod")[f"{POD}-ps-0"])["DMLC_PS_ROOT_URI"] == f"{POD}-master.{NS}.svc"


def test_resources_and_placement_come_from_the_file() -> None:
    gpu = ReplicaTemplate(
        resources=resources(cpu=0.5, memory=256, gpu=1),
        node_selector={"polyaxon.com": "gpu", "fast": True},  # type: ignore[dict-item]
        tolerations=({"key": "k", "operator": "Exists", "effect": "NoSchedule"},),
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    )
    pod = by_kind(objects(plan(workers=1, default_worker=gpu)), "Pod")[f"{POD}-worker-0"]
    c = pod["spec"]["containers"][0]
    assert c["resources"] == {
        "requests": {"cpu": "500m", "memory": "256Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi", "nvidia.com/gpu": "1"},
    }
    assert pod["spec"]["nodeSelector"] == {"polyaxon.com": "gpu", "fast": "true"}
    assert pod["spec"]["tolerations"][0]["key"] == "k"
    assert "nodeAffinity" in pod["spec"]["affinity"]


def test_local_paths_stay_home_and_the_token_comes_from_a_secret() -> None:
    env = env_of(by_kind(objects(plan(workers=0), server_url="http://phalanx:8000"), "Pod")[f"{POD}-master"])
    assert "PHALANX_HOME" not in env and "PHALANX_SPOOL" not in env
    assert env["PHALANX_HOST"] == "http://phalanx:8000"
    assert env["PHALANX_TOKEN"] is None  # valueFrom secretKeyRef, never the value itself


def test_every_rendered_object_passes_strict_schema_validation() -> None:
    objs = objects(plan(framework=Framework.TENSORFLOW, workers=2, ps=1, max_run_seconds=600))
    validate_core(objs)  # raises on any unknown or mistyped field
    assert by_kind(objs, "Pod")[f"{POD}-master"]["spec"]["activeDeadlineSeconds"] == 600


def test_a_value_kubernetes_would_refuse_is_a_spec_error_naming_the_field() -> None:
    bad = ReplicaTemplate(tolerations=({"key": "k", "operator": "Exists", "effct": "NoSchedule"},))
    with pytest.raises(SpecError, match=r"tolerations.*effct"):
        objects(plan(workers=1, default_worker=bad))


def test_the_schemas_are_read_once_and_still_refuse_what_kubernetes_would() -> None:
    import kubernetes_validate

    good = objects(plan(framework=Framework.TENSORFLOW, workers=2, ps=1))
    validate_core(good)
    read = kubernetes_validate.utils.schema_contents.cache_info().misses
    validate_core(good)
    bad = ReplicaTemplate(tolerations=({"key": "k", "operator": "Exists", "effct": "NoSchedule"},))
    with pytest.raises(SpecError, match=r"tolerations.*effct"):
        objects(plan(workers=1, default_worker=bad))
    assert kubernetes_validate.utils.schema_contents.cache_info().misses == read  # no file read again


def test_several_pytorch_processes_per_pod_run_through_the_slot_launcher() -> None:
    p = plan(workers=1)
    p = replace(p, replicas=tuple(replace(r, processes=2) for r in p.replicas))
    worker = by_kind(objects(p), "Pod")[f"{POD}-worker-0"]
    env = env_of(worker)
    assert (env["PHALANX_PROCESSES"], env["PHALANX_NODE_RANK"], env["PHALANX_NNODES"]) == ("2", "1", "2")
    assert env["PHALANX_COMMAND"] == "python -u train.py"
    assert worker["spec"]["containers"][0]["command"][-1].endswith(
        "exec python /phalanx/code/.phalanx-sdk/phalanx_slots.py"
    )
    tf = plan(framework=Framework.TENSORFLOW, workers=1)
    tf = replace(tf, replicas=tuple(replace(r, processes=2) for r in tf.replicas))
    with pytest.raises(SpecError, match="one replica per process"):
        objects(tf)


# -- controller against the fake --------------------------------------------------------------
def submitted(api: FakeKubernetesAPI, p=None) -> tuple[KubernetesBackend, str]:  # type: ignore[no-untyped-def]
    b = backend(api)
    handle = b.submit(b.dry_run(p or plan(workers=1), context()))
    return b, handle


def test_submit_creates_the_owner_first_and_gives_its_uid_to_the_rest() -> None:
    api = FakeKubernetesAPI()
    _, handle = submitted(api)
    assert handle == f"{NS}/{EXPERIMENT_ID}"
    assert api.calls[0] == f"create ConfigMap {NS}/{POD}"
    uid = api.get(NS, "ConfigMap", POD)["metadata"]["uid"]  # type: ignore[index]
    for name in api.names("Pod", NS) + api.names("Service", NS):
        kind = "Pod" if name in api.names("Pod", NS) else "Service"
        ref = api.get(NS, kind, name)["metadata"]["ownerReferences"][0]  # type: ignore[index]
        assert ref["uid"] == uid != PLACEHOLDER_UID


def test_pod_phases_become_replica_states() -> None:
    api = FakeKubernetesAPI()
    b, handle = submitted(api)
    assert b.describe(handle).status is ExperimentStatus.STARTING  # type: ignore[union-attr]
    api.start(f"{POD}-master", NS, node="gpu-1")
    api.start(f"{POD}-worker-0", NS, node="gpu-2")
    job = b.describe(handle)
    assert job.status is ExperimentStatus.RUNNING  # type: ignore[union-attr]
    assert {r.name: r.host for r in job.replicas} == {"master": "gpu-1", "worker-0": "gpu-2"}  # type: ignore[union-attr]
    api.finish(f"{POD}-master", 0, NS)
    api.finish(f"{POD}-worker-0", 0, NS)
    job = b.describe(handle)
    assert job.status is ExperimentStatus.SUCCEEDED  # type: ignore[union-attr]
    assert [r.exit_code for r in job.replicas] == [0, 0]  # type: ignore[union-attr]


def test_watch_fails_fast_stopping_the_other_replicas_and_keeping_their_logs() -> None:
    api = FakeKubernetesAPI()
    b, handle = submitted(api, plan(workers=2))
    for name in ("master", "worker-0", "worker-1"):
        api.start(f"{POD}-{name}", NS)
    seen = []
    watcher = threading.Thread(target=lambda: seen.extend(b.watch(handle, timeout=60)))
    watcher.start()
    api.log(f"{POD}-worker-1", "loss 0.5", "RuntimeError: boom", namespace=NS)
    api.finish(f"{POD}-worker-1", 1, NS)
    watcher.join(timeout=60)
    assert not watcher.is_alive()
    final = seen[-1]
    assert final.status is ExperimentStatus.FAILED
    assert final.reason == "worker-1 exited with code 1"
    states = {r.name: r.state for r in final.replicas}
    assert states == {
        "master": ReplicaState.STOPPED,
        "worker-0": ReplicaState.STOPPED,
        "worker-1": ReplicaState.FAILED,
    }
    assert list(b.logs(handle, "worker-1")) == ["loss 0.5", "RuntimeError: boom"]


def test_logs_follow_a_pod_from_before_it_starts_to_its_end() -> None:
    api = FakeKubernetesAPI()
    b, handle = submitted(api)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(b.logs(handle, "master", follow=True)))
    reader.start()
    api.start(f"{POD}-master", NS)
    api.log(f"{POD}-master", "epoch 0", namespace=NS)
    api.log(f"{POD}-master", "epoch 1", namespace=NS)
    api.finish(f"{POD}-master", 0, NS)
    reader.join(timeout=30)
    assert lines == ["epoch 0", "epoch 1"]


def test_a_pod_that_cannot_pull_its_image_fails_instead_of_waiting_forever() -> None:
    api = FakeKubernetesAPI()
    b, handle = submitted(api)
    api.wait_pending(f"{POD}-worker-0", "ImagePullBackOff", NS)
    job = b.describe(handle)
    assert job.status is ExperimentStatus.FAILED  # type: ignore[union-attr]
    assert "ImagePullBackOff" in (job.reason or "")  # type: ignore[union-attr]


def test_cancel_garbage_collects_everything_and_is_idempotent() -> None:
    api = FakeKubernetesAPI()
    b, handle = submitted(api, plan(framework=Framework.TENSORFLOW, workers=1, ps=1))
    assert api.names("Pod", NS) and api.names("Service", NS)
    b.cancel(handle)
    b.cancel(handle)
    assert api.objects == {}
    assert b.describe(handle) is None


def test_a_failed_submit_leaves_nothing_behind() -> None:
    api = FakeKubernetesAPI()
    api.create(
        NS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{POD}-worker-0"},
            "spec": {"containers": [{"name": "x", "image": "busybox"}]},
        },
    )
    with pytest.raises(BackendUnavailable, match="already exists"):
        submitted(api)
    assert api.names("ConfigMap", NS) == [] and api.names("Service", NS) == []
    assert api.names("Pod", NS) == [f"{POD}-worker-0"]  # only what was there before


def test_pod_status_of_a_vanished_pod_is_stopped() -> None:
    assert pod_status("worker-0", None).state is ReplicaState.STOPPED


def test_unknown_pod_phase_is_unknown() -> None:
    pod = {"metadata": {}, "status": {"phase": "Weird"}}
    assert pod_status("master", pod).state is ReplicaState.UNKNOWN


def test_a_restart_resubmits_under_the_same_names_after_the_last_attempt_is_gone() -> None:
    api = FakeKubernetesAPI()
    b, handle = submitted(api)
    api.start(f"{POD}-worker-0", NS)
    api.finish(f"{POD}-worker-0", 1, NS)
    assert b.describe(handle).status is ExperimentStatus.FAILED  # type: ignore[union-attr]
    again = b.submit(b.dry_run(plan(workers=1), context()))  # what the supervisor does on a restart
    assert again == handle
    job = b.describe(again)
    assert job.status is ExperimentStatus.STARTING  # type: ignore[union-attr]
    assert {r.state for r in job.replicas} == {ReplicaState.PENDING}  # type: ignore[union-attr]
