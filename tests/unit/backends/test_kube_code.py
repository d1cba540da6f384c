"""How code, environment and SDK reach a pod: the bundle, the build-once environment step, the slot
launcher (real processes), and the refusals that keep a cluster run from silently losing metrics."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from phalanx.backends import kube_code
from phalanx.backends.kubeflow import KubeflowBackend, job_problems
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import Framework
from phalanx.errors import SpecError
from phalanx.plan import Plan
from phalanx.spec.model import Build
from tests.unit.backends.conftest import EXPERIMENT_ID, SERVER, CodeShelf, context, plan

SLOTS = Path(kube_code.__file__).with_name("slots.py")


def _names(data: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return set(tar.getnames())


def _sdk(tmp_path: Path) -> Path:
    from phalanx.sdkcopy import sdk_path

    return sdk_path(tmp_path / "home")


def test_the_bundle_holds_the_code_and_the_sdk_but_no_vcs_venv_data_or_big_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "exp"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print('hi')\n")
    (src / "pkg" / "model.py").write_text("X = 1\n")
    for skipped in (".git/HEAD", "venv/pyvenv.cfg", "data/big.csv", "__pycache__/m.pyc", "myenv/pyvenv.cfg"):
        (src / skipped).parent.mkdir(parents=True, exist_ok=True)
        (src / skipped).write_text("x")
    (src / "weights.bin").write_bytes(b"\0" * (kube_code.SKIP_FILE_BYTES + 1))
    data = kube_code.bundle(src, _sdk(tmp_path))
    names = _names(data)
    assert {"train.py", "pkg/model.py", ".phalanx-sdk/phalanx/__init__.py"} <= names
    assert {
        ".phalanx-sdk/phalanx_slots.py",
        ".phalanx-sdk/phalanx_env.py",
        ".phalanx-sdk/phalanx_attempt.py",
    } <= names and ".phalanx-sdk/phalanx/tracking/task.py" in names
    assert not [n for n in names if n.startswith((".git", "venv", "data", "__pycache__", "myenv"))]
    assert "weights.bin" not in names
    # content-addressed: same files, same bytes, whenever it is built (the gzip header once held the
    # time of the build, so two builds a second boundary apart differed: a CI flake under load)
    later = time.time() + 3600
    monkeypatch.setattr(time, "time", lambda: later)
    assert kube_code.bundle(src, _sdk(tmp_path)) == data


def test_a_bundle_over_the_cap_is_refused_naming_the_biggest_files(tmp_path: Path) -> None:
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "a.npy").write_bytes(b"\1" * 3000)
    (tmp_path / "exp" / "train.py").write_text("pass\n")
    with pytest.raises(SpecError, match=r"cap is 0 MiB; largest: a\.npy"):
        kube_code.bundle(tmp_path / "exp", _sdk(tmp_path), cap=2000)


def _slots(tmp_path: Path, command: str, **env: str) -> subprocess.Popen[str]:
    full = {"PATH": os.environ["PATH"], "PHALANX_COMMAND": command, **env}
    return subprocess.Popen([sys.executable, str(SLOTS)], env=full, stdout=subprocess.PIPE, text=True)


def test_a_cluster_without_a_server_or_a_place_for_environments_is_refused() -> None:
    bare = Cluster(name="k", kind="kubernetes")
    for engine in (
        KubernetesBackend(Settings(home="/tmp/h"), bare),
        KubeflowBackend(Settings(home="/tmp/h"), bare),
    ):
        with pytest.raises(SpecError, match="needs a Phalanx server"):
            engine.dry_run(plan(), context())
    with_pip = replace(plan(), build=Build(pip_packages=("torch==2.13.0",)))
    no_volume = Cluster(name="k", kind="kubernetes", server_url=SERVER)
    with pytest.raises(SpecError, match="--env-volume"):
        KubernetesBackend(Settings(home="/tmp/h"), no_volume).dry_run(with_pip, context())


def test_pods_fetch_code_and_build_the_environment_in_init_containers() -> None:
    with_pip = replace(plan(workers=1), build=Build(pip_packages=("scikit-learn==1.9.1",)))
    cluster = Cluster(name="k", kind="kubernetes", server_url=SERVER, env_volume="ml-envs")
    objs = KubernetesBackend(Settings(home="/tmp/h"), cluster).dry_run(with_pip, context()).native
    pod = next(o for o in objs if o["kind"] == "Pod")
    inits = pod["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["fetch-code", "build-env"]
    assert f"{SERVER}/api/v1/experiments/{EXPERIMENT_ID}/files/_phalanx/code.tar.gz" in inits[0]["command"]
    assert "scikit-learn==1.9.1" in inits[1]["command"]
    claims = [v.get("persistentVolumeClaim") for v in pod["spec"]["volumes"]]
    assert {"claimName": "ml-envs"} in claims
    main = pod["spec"]["containers"][0]["command"][-1]
    assert "pip install" not in main  # nothing is installed at pod start any more
    assert f"/phalanx/envs/{kube_code.env_hash(with_pip)}/site" in main and "cd /phalanx/code" in main


def test_submit_stores_the_bundle_before_creating_anything(tmp_path: Path) -> None:
    from tests.support.fake_kube import FakeKubernetesAPI

    api, shelf = FakeKubernetesAPI(), CodeShelf()
    created_before: list[int] = []

    def put(url: str, data: bytes) -> None:
        created_before.append(len(api.calls))
        shelf(url, data)

    src = tmp_path / "exp"
    src.mkdir()
    (src / "train.py").write_text("pass\n")
    engine = KubeflowBackend(
        Settings(home=tmp_path / "h"),
        Cluster(name="k", kind="kubernetes", server_url=SERVER),
        api=api,
        put_code=put,
    )
    engine.submit(engine.dry_run(plan(workers=1), replace(context(), workdir=str(src))))
    assert created_before == [0]  # the code is there before any pod could look for it
    ((url, data),) = shelf.bundles.items()
    assert url.endswith(f"/experiments/{EXPERIMENT_ID}/files/_phalanx/code.tar.gz")
    assert "train.py" in _names(data)


def _mpi(workers: int = 2, processes: int = 1) -> Plan:
    p = plan(framework=Framework.HOROVOD, workers=workers)
    return replace(p, replicas=tuple(replace(r, processes=processes) for r in p.replicas))


def test_an_mpijob_launcher_runs_mpirun_over_every_slot_with_the_master_as_rank_0() -> None:
    cluster = Cluster(name="k", kind="kubernetes", server_url=SERVER, namespace="ml")
    job = KubeflowBackend(Settings(home="/tmp/h"), cluster).dry_run(_mpi(2, 2), context()).native[0]
    assert job["apiVersion"] == "kubeflow.org/v2beta1" and job_problems(job) == []
    spec = job["spec"]
    assert (spec["slotsPerWorker"], spec["runLauncherAsWorker"], spec["mpiImplementation"]) == (
        2,
        True,
        "OpenMPI",
    )
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    command = launcher["containers"][0]["command"][-1]
    assert "mpirun --allow-run-as-root -np 6 --map-by slot" in command  # (1 master + 2 workers) x 2 slots
    assert f"MASTER_ADDR=phx-{EXPERIMENT_ID}-launcher.phx-{EXPERIMENT_ID}.ml.svc" in command
    assert "-x PHALANX_COMMAND" in command and "OMPI_COMM_WORLD_RANK" in command
    worker = spec["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    assert worker["template"]["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
    assert [c["name"] for c in worker["template"]["spec"]["initContainers"]] == ["fetch-code"]


# -- Kubeflow Trainer v2 --------------------------------------------------------------------------
TRAINER = Cluster(name="k", kind="kubernetes", server_url=SERVER, namespace="ml", kubeflow_api="trainer-v2")


def test_a_trainer_v2_cluster_runs_pytorch_as_a_trainjob_valid_by_its_crd() -> None:
    from phalanx.backends.kubeflow_trainer import TrainerBackend, trainjob_problems

    assert TRAINER.backend_for("kubeflow") == "trainer" and TRAINER.backend_for(None) == "kubernetes"
    p = plan(workers=2)
    p = replace(p, replicas=tuple(replace(r, processes=2) for r in p.replicas))
    job = TrainerBackend(Settings(home="/tmp/h"), TRAINER).dry_run(p, context()).native[0]
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert trainjob_problems(job) == []
    spec = job["spec"]
    assert spec["runtimeRef"]["name"] == "torch-distributed"
    assert (spec["trainer"]["numNodes"], spec["trainer"]["numProcPerNode"]) == (3, 2)
    command = spec["trainer"]["command"][-1]
    assert command.index("fetch-code") < command.index("phalanx_slots.py")  # code first, then the slots
    patch = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert patch["name"] == "node"
    assert trainjob_problems({**job, "spec": {**spec, "trainer": {**spec["trainer"], "gpus": 1}}})  # strict


def test_trainer_v2_refuses_what_it_has_no_runtime_for_naming_the_way_out() -> None:
    from phalanx.backends.kubeflow_trainer import TrainerBackend

    engine = TrainerBackend(Settings(home="/tmp/h"), TRAINER)
    with pytest.raises(SpecError, match="--kubeflow-api v1"):
        engine.dry_run(plan(framework=Framework.TENSORFLOW, workers=1, ps=1), context())


def test_a_trainjob_is_followed_through_its_conditions_and_node_pods() -> None:
    from phalanx.backends.kubeflow_trainer import LABEL_INDEX, LABEL_JOBSET, TrainerBackend
    from phalanx.domain import ExperimentStatus
    from tests.support.fake_kube import FakeKubernetesAPI

    api = FakeKubernetesAPI()
    engine = TrainerBackend(Settings(home="/tmp/h"), TRAINER, api=api, put_code=CodeShelf())
    handle = engine.submit(engine.dry_run(plan(workers=1), context()))
    status = engine.describe(handle)
    assert status is not None and status.status is ExperimentStatus.CREATED
    assert [r.name for r in status.replicas] == ["master", "worker-0"]
    for index in ("0", "1"):  # the JobSet's node pods, as the runtime would create them
        api.create(
            "ml",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"phx-{EXPERIMENT_ID}-node-0-{index}-x",
                    "labels": {LABEL_JOBSET: f"phx-{EXPERIMENT_ID}", LABEL_INDEX: index},
                },
                "spec": {"containers": [{"name": "node", "image": "python:3.11-slim"}]},
            },
        )
    api.set_condition("TrainJob", f"phx-{EXPERIMENT_ID}", "Failed", namespace="ml", message="node 1 failed")
    failed = engine.describe(handle)
    assert (
        failed is not None and failed.status is ExperimentStatus.FAILED and failed.reason == "node 1 failed"
    )
    engine.cancel(handle)
    engine.cancel(handle)  # idempotent
    assert engine.describe(handle) is None
