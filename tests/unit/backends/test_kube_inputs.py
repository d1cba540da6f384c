"""Data inputs in Kubernetes: every pod, native or in a Kubeflow operator job, fetches the download
inputs in a fetch-inputs init container into an emptyDir the replica reads (read-only) through
PHALANX_INPUT_<NAME>; the manifests stay valid by their schemas; Trainer v2 refuses with the way out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from phalanx.backends.kube_inputs import INPUTS_DIR
from phalanx.backends.kube_objects import validate_core
from phalanx.backends.kubeflow import KubeflowBackend, job_problems
from phalanx.backends.kubeflow_trainer import TrainerBackend
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.errors import SpecError
from tests.unit.backends.conftest import EXPERIMENT_ID, SERVER, context, plan

ORDER = {
    "name": "digits",
    "env": "PHALANX_INPUT_DIGITS",
    "key": "c5c68113ab15" * 4,
    "what": "input 'digits' (dataset digits@2)",
    "url": "s3://lake/digits",
    "files": [["labels.txt", 4, "ab" * 32]],
}


def _pod_specs(objects: Any) -> list[dict[str, Any]]:
    from phalanx.backends.kube_inputs import _pod_specs

    return [s for o in objects for s in _pod_specs(o)]


@pytest.mark.parametrize("engine", [KubernetesBackend, KubeflowBackend])
def test_every_pod_fetches_the_inputs_in_an_init_container_before_the_replica(engine: Any) -> None:
    cluster = Cluster(name="k", kind="kubernetes", server_url=SERVER)
    ctx = replace(context(), input_fetches=(ORDER,))
    objects = engine(Settings(home="/tmp/h"), cluster).dry_run(plan(workers=2), ctx).native
    specs = _pod_specs(objects)
    assert len(specs) >= 2  # master and workers
    path = f"{INPUTS_DIR}/{ORDER['key']}"
    for spec in specs:
        inits = spec["initContainers"]
        assert [c["name"] for c in inits] == ["fetch-code", "fetch-inputs"]
        fetch = inits[-1]
        assert fetch["image"] == spec["containers"][0]["image"]  # the replica's image, stdlib only
        assert f"{SERVER}/api/v1/experiments/{EXPERIMENT_ID}/inputs" in fetch["command"]
        assert fetch["volumeMounts"] == [{"name": "phalanx-inputs", "mountPath": INPUTS_DIR}]
        assert {"name": "phalanx-inputs", "emptyDir": {}} in spec["volumes"]
        for c in spec["containers"]:
            assert {"name": "phalanx-inputs", "mountPath": INPUTS_DIR, "readOnly": True} in c["volumeMounts"]
            assert {"name": "PHALANX_INPUT_DIGITS", "value": path} in c["env"]
    if engine is KubernetesBackend:
        validate_core([o for o in objects if o["kind"] == "Pod"])
    else:
        assert job_problems(objects[0]) == []
    # without inputs nothing of this is added
    bare = engine(Settings(home="/tmp/h"), cluster).dry_run(plan(workers=2), context()).native
    assert all("fetch-inputs" not in str(s.get("initContainers")) for s in _pod_specs(bare))


def test_trainer_v2_refuses_download_inputs_naming_the_way_out() -> None:
    cluster = Cluster(name="k", kind="kubernetes", server_url=SERVER, kubeflow_api="trainer-v2")
    ctx = replace(context(), input_fetches=(ORDER,))
    with pytest.raises(SpecError, match=r"--kubeflow-api v1.*mode: mount"):
        TrainerBackend(Settings(home="/tmp/h"), cluster).dry_run(plan(workers=1), ctx)


def test_an_mpijobs_ranks_started_over_ssh_get_the_inputs_path_from_mpirun() -> None:
    from phalanx.domain import Framework

    cluster = Cluster(name="k", kind="kubernetes", server_url=SERVER)
    horovod = plan(framework=Framework.HOROVOD, workers=1)
    record = {"name": "digits", "kind": "dataset", "ref": "digits@2", "env": "PHALANX_INPUT_DIGITS"}
    ctx = replace(context(), input_fetches=(ORDER,))
    job = KubeflowBackend(Settings(home="/tmp/h"), cluster).dry_run(replace(horovod, inputs=(record,)), ctx)
    spec = job.native[0]["spec"]["mpiReplicaSpecs"]
    assert "-x PHALANX_INPUT_DIGITS" in spec["Launcher"]["template"]["spec"]["containers"][0]["command"][-1]
    worker = spec["Worker"]["template"]["spec"]
    assert [c["name"] for c in worker["initContainers"]] == ["fetch-code", "fetch-inputs"]
    assert job_problems(job.native[0]) == []
