"""ClientAPI, the adapter over the official kubernetes client, against FakeKubernetesServer (the
fake API server over HTTP): requests, deserialization, watch and log streams, API errors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.backends.kube_api import ClientAPI, KubeError
from phalanx.backends.kubeflow import KubeflowBackend
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import BackendKind, ExperimentStatus, ReplicaState
from phalanx.errors import BackendUnavailable
from tests.support.fake_kube_http import FakeKubernetesServer
from tests.unit.backends.conftest import EXPERIMENT_ID, SERVER, CodeShelf, context, plan

POD = f"phx-{EXPERIMENT_ID}"
CLUSTER = Cluster(name="k", kind="kubernetes", server_url=SERVER, context="fake")


@pytest.fixture
def server() -> Iterator[FakeKubernetesServer]:
    with FakeKubernetesServer() as s:
        yield s


@pytest.fixture
def client(server: FakeKubernetesServer, tmp_path: Path) -> ClientAPI:
    return ClientAPI(context="fake", kubeconfig=str(server.kubeconfig(tmp_path / "kubeconfig")))


def test_the_native_engine_runs_through_the_real_client(
    server: FakeKubernetesServer, client: ClientAPI
) -> None:
    b = KubernetesBackend(Settings(home="/tmp/h"), CLUSTER, api=client, put_code=CodeShelf())
    handle = b.submit(b.dry_run(plan(workers=1), context()))
    assert sorted(server.api.names("Pod")) == [f"{POD}-master", f"{POD}-worker-0"]
    assert server.api.names("Service") == [f"{POD}-master"]
    for name in (f"{POD}-master", f"{POD}-worker-0"):
        server.api.start(name, node="n7")
    job = b.describe(handle)
    assert job is not None and job.status is ExperimentStatus.RUNNING
    assert {r.host for r in job.replicas} == {"n7"}

    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(b.logs(handle, "worker-0", follow=True)))
    reader.start()
    seen = []
    watcher = threading.Thread(target=lambda: seen.extend(b.watch(handle, timeout=30)))
    watcher.start()
    server.api.log(f"{POD}-worker-0", "step 1", "oom!")
    server.api.finish(f"{POD}-worker-0", 137, reason="OOMKilled")
    reader.join(timeout=30)
    watcher.join(timeout=60)
    assert lines == ["step 1", "oom!"]
    final = seen[-1]
    assert final.status is ExperimentStatus.FAILED
    assert final.reason == "worker-0 OOMKilled"
    assert {r.name: r.state for r in final.replicas}["master"] is ReplicaState.STOPPED  # gang rule
    b.cancel(handle)
    b.cancel(handle)
    assert server.api.objects == {}
    assert b.describe(handle) is None


def test_api_errors_become_kube_errors_with_their_status(client: ClientAPI) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}
    created = client.create("default", cm)
    assert created["metadata"]["uid"]
    with pytest.raises(KubeError) as exc:
        client.create("default", cm)
    assert exc.value.status == 409
    assert client.get("default", "ConfigMap", "nope") is None
    assert client.delete("default", "ConfigMap", "x") is True
    assert client.delete("default", "ConfigMap", "x") is False


def test_the_kubeflow_engine_creates_and_deletes_its_job_through_the_real_client(
    server: FakeKubernetesServer, client: ClientAPI
) -> None:
    b = KubeflowBackend(Settings(home="/tmp/h"), CLUSTER, api=client, put_code=CodeShelf())
    handle = b.submit(b.dry_run(plan(workers=2, backend=BackendKind.KUBEFLOW), context()))
    assert server.api.names("PyTorchJob") == [POD]
    server.api.set_condition("PyTorchJob", POD, "Created")
    server.api.set_condition("PyTorchJob", POD, "Running")
    job = b.describe(handle)
    assert job is not None and job.status is ExperimentStatus.RUNNING
    b.cancel(handle)
    assert server.api.objects == {}


def test_no_kubeconfig_is_a_clear_backend_error(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="no Kubernetes configuration"):
        ClientAPI(context="missing", kubeconfig=str(tmp_path / "none"))
