"""The supervisor drives the Kubernetes and Kubeflow engines through the Backend protocol alone:
states, console lines into the store, fail fast, and nothing left in the (fake) cluster after."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from phalanx.backends.kubeflow import KubeflowBackend
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import BackendKind, ExperimentStatus
from tests.support.fake_kube import FakeKubernetesAPI
from tests.unit.backends.conftest import SERVER, CodeShelf, plan

KUBE = Cluster(name="k", kind="kubernetes", server_url=SERVER)


class Kubelet:
    """Plays the nodes: runs every pod that appears, prints a line, exits with ``exit_code(name)``."""

    def __init__(self, api: FakeKubernetesAPI, exit_code: Callable[[str], int]) -> None:
        self.api, self.exit_code = api, exit_code
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.done: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            for name in self.api.names("Pod"):
                pod = self.api.get("default", "Pod", name)
                if name in self.done or pod is None or pod["status"]["phase"] != "Pending":
                    continue
                self.done.add(name)
                self.api.start(name)
                self.api.log(name, f"hello from {name}")
                self.api.finish(name, self.exit_code(name))
            self.stop.wait(0.05)

    def __enter__(self) -> Kubelet:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def run(backend: KubernetesBackend | KubeflowBackend, p, home: Path):  # type: ignore[no-untyped-def]
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.store import open_store
    from phalanx.supervisor import prepare

    settings = Settings()
    store = open_store(settings)
    # the experiment's folder, bundled for the pods: a small project (the default, the current
    # directory, is this repository: compressing it cost a second a test)
    code = home.parent / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('training')\n")
    prepared = prepare(p, settings=settings, backend=backend, workdir=code)
    outcome = Runner(settings).run(prepared, LaunchOptions(), handle_signals=False, store=store)
    return outcome, store


@pytest.mark.timeout(120)
def test_a_native_run_succeeds_with_every_replicas_console_in_the_store(phalanx_home: Path) -> None:
    api = FakeKubernetesAPI()
    with Kubelet(api, lambda name: 0):
        outcome, store = run(
            KubernetesBackend(Settings(), KUBE, api=api, put_code=CodeShelf()), plan(workers=1), phalanx_home
        )
    assert outcome.status is ExperimentStatus.SUCCEEDED, outcome.reason
    texts = {line.text for line in store.logs(outcome.experiment_id)}
    assert any(t.startswith("hello from phx-") and t.endswith("-worker-0") for t in texts), texts
    assert api.objects == {}  # the owner was deleted and everything it owned went with it


@pytest.mark.timeout(120)
def test_a_failing_replica_fails_the_native_run_naming_it(phalanx_home: Path) -> None:
    api = FakeKubernetesAPI()
    with Kubelet(api, lambda name: 3 if name.endswith("worker-1") else 0):
        outcome, _ = run(
            KubernetesBackend(Settings(), KUBE, api=api, put_code=CodeShelf()), plan(workers=2), phalanx_home
        )
    assert outcome.status is ExperimentStatus.FAILED
    assert outcome.reason and outcome.reason.startswith("worker-1 exited with code 3"), outcome.reason
    assert api.objects == {}


@pytest.mark.timeout(120)
def test_a_kubeflow_run_follows_the_job_conditions(phalanx_home: Path) -> None:
    api = FakeKubernetesAPI()
    name = "phx-"

    def operator() -> None:  # creates the pods, then reports the job's conditions
        while not api.names("PyTorchJob"):
            stop.wait(0.05)
        job = api.names("PyTorchJob")[0]
        api.set_condition("PyTorchJob", job, "Created")
        api.run_operator("PyTorchJob", job)
        api.set_condition("PyTorchJob", job, "Running")
        while any(
            api.get("default", "Pod", p)["status"]["phase"] in ("Pending", "Running")  # type: ignore[index]
            for p in api.names("Pod")
        ):
            stop.wait(0.05)
        api.set_condition("PyTorchJob", job, "Succeeded")

    stop = threading.Event()
    helper = threading.Thread(target=operator, daemon=True)
    helper.start()
    with Kubelet(api, lambda pod: 0):
        outcome, store = run(
            KubeflowBackend(Settings(), KUBE, api=api, put_code=CodeShelf()),
            plan(workers=1, backend=BackendKind.KUBEFLOW),
            phalanx_home,
        )
    stop.set()
    assert outcome.status is ExperimentStatus.SUCCEEDED, outcome.reason
    assert any(line.text.startswith(f"hello from {name}") for line in store.logs(outcome.experiment_id))
    assert api.objects == {}
