"""Pods get a token for their experiment only, never the server's: a Secret per experiment, created
before the pods, gone with the experiment (against FakeKubernetesAPI: no API server runs here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from phalanx.backends.kube_api import KubeError
from phalanx.backends.kube_objects import validate_core
from phalanx.backends.kubeflow import KubeflowBackend
from phalanx.backends.kubeflow_trainer import TrainerBackend
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import Framework
from phalanx.errors import BackendUnavailable
from phalanx.tokens import token_experiment
from tests.support.fake_kube import FakeKubernetesAPI
from tests.unit.backends.conftest import EXPERIMENT_ID, SERVER, CodeShelf, context, plan

NS = "ml"
SERVER_TOKEN = "the-servers-own-token"
SECRET = f"phx-{EXPERIMENT_ID}-token"


def _engine(kind: type[Any], api: FakeKubernetesAPI, token: str | None = SERVER_TOKEN) -> Any:
    return kind(
        Settings(home="/tmp/h", token=token),
        Cluster(name="k", kind="kubernetes", server_url=SERVER, namespace=NS),
        api=api,
        put_code=CodeShelf(),
    )


def _token_refs(obj: Any) -> list[dict[str, Any]]:
    """Every secretKeyRef of PHALANX_TOKEN anywhere in an object."""
    found: list[dict[str, Any]] = []
    if isinstance(obj, dict):
        if obj.get("name") == "PHALANX_TOKEN" and "valueFrom" in obj:
            found.append(obj["valueFrom"]["secretKeyRef"])
        for value in obj.values():
            found += _token_refs(value)
    elif isinstance(obj, list):
        for value in obj:
            found += _token_refs(value)
    return found


def _check_render(objects: list[Any]) -> None:
    secret = objects[1]
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == SECRET
    given = secret["stringData"]["token"]
    assert token_experiment(SERVER_TOKEN, given) == EXPERIMENT_ID  # writes this experiment only
    assert SERVER_TOKEN not in yaml.safe_dump_all(objects)  # the server's token is in no object
    refs = _token_refs(objects)
    assert refs and all(r == {"name": SECRET, "key": "token"} for r in refs)  # required, per experiment
    validate_core([secret])


def test_native_pods_read_a_per_experiment_secret_owned_by_the_experiment() -> None:
    api = FakeKubernetesAPI()
    engine = _engine(KubernetesBackend, api)
    dry = engine.dry_run(plan(workers=1), context())
    _check_render(list(dry.native))
    handle = engine.submit(dry)
    assert api.calls[:2] == [f"create ConfigMap {NS}/phx-{EXPERIMENT_ID}", f"create Secret {NS}/{SECRET}"]
    engine.cancel(handle)
    assert api.objects == {}  # the Secret went with the ConfigMap (garbage collection)


def test_kubeflow_and_trainer_jobs_create_the_secret_first_and_delete_it_at_cancel() -> None:
    for kind in (KubeflowBackend, TrainerBackend):
        api = FakeKubernetesAPI()
        engine = _engine(kind, api)
        dry = engine.dry_run(plan(framework=Framework.PYTORCH, workers=1), context())
        _check_render(list(dry.native))
        handle = engine.submit(dry)
        assert api.calls[0] == f"create Secret {NS}/{SECRET}", kind
        assert api.names("Secret", NS) == [SECRET]
        engine.cancel(handle)
        engine.cancel(handle)
        assert api.objects == {}, kind


class _RefusingJobs(FakeKubernetesAPI):
    """The cluster refuses the operator's job (a quota, an admission webhook)."""

    def create(self, namespace: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        if obj["kind"] != "Secret":
            raise KubeError(403, "exceeded quota")
        return super().create(namespace, obj)


def test_a_refused_job_leaves_no_token_secret_and_says_which_job() -> None:
    for kind, job_kind in ((KubeflowBackend, "PyTorchJob"), (TrainerBackend, "TrainJob")):
        api = _RefusingJobs()
        engine = _engine(kind, api)
        dry = engine.dry_run(plan(framework=Framework.PYTORCH, workers=1), context())
        with pytest.raises(BackendUnavailable, match=f"creating {job_kind} phx-{EXPERIMENT_ID}.* failed"):
            engine.submit(dry)
        assert api.calls[0] == f"create Secret {NS}/{SECRET}", kind
        assert api.objects == {}, kind


def test_without_a_server_token_pods_keep_the_optional_user_secret() -> None:
    api = FakeKubernetesAPI()
    objects = list(_engine(KubernetesBackend, api, token=None).dry_run(plan(workers=0), context()).native)
    assert all(o["kind"] != "Secret" for o in objects)
    assert {r["name"] for r in _token_refs(objects)} == {"phalanx-token"}
