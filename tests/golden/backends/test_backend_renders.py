"""Pinned dry-run renders: the sbatch scripts and Kubernetes/Kubeflow YAML a user sees with
`phalanx run --cluster NAME --dry-run`. A change to any engine's output shows up here as a diff.
Regenerate after an intended change with: PHALANX_UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden/backends
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from phalanx.backends.base import LaunchContext
from phalanx.backends.kubeflow import KubeflowBackend
from phalanx.backends.kubeflow_trainer import TrainerBackend
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.backends.ray import RayBackend
from phalanx.backends.slurm import SlurmBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import BackendKind, Framework, Range, Resources
from phalanx.plan import Plan, build_plan
from phalanx.spec.model import Build, ExperimentSpec, ReplicaTemplate, Topology

GOLDEN = Path(__file__).resolve().parent / "renders"
SETTINGS = Settings(home="/home/user/.phalanx")
CONTEXT = LaunchContext(
    "5eed0000cafe",
    "/home/user/exp",
    "/home/user/.phalanx/venvs/abc/bin/python",
    {"PHALANX_HOME": "/home/user/.phalanx", "PHALANX_SPOOL": "/home/user/.phalanx/spool/5eed0000cafe"},
)
SLURM = Cluster(name="hpc", kind="slurm", partition="gpu", shared_dir="/shared/phalanx")
KUBE = Cluster(name="k8s", kind="kubernetes", namespace="ml", server_url="http://phalanx.ml.svc:8000")


def res(cpu: float | None = None, memory: float | None = None, gpu: float | None = None) -> Resources:
    return Resources(Range(cpu, cpu), Range(memory, memory), Range(gpu, gpu))


def spec_plan(framework: Framework | None, **kw: object) -> Plan:
    return build_plan(
        ExperimentSpec(
            version=1, kind="experiment", command=("python -u train.py --lr 0.01",), framework=framework, **kw
        )  # type: ignore[arg-type]
    )


PYTORCH = spec_plan(
    Framework.PYTORCH,
    master=ReplicaTemplate(resources=res(cpu=2, memory=4096, gpu=1)),
    topology=Topology(n_workers=2, default_worker=ReplicaTemplate(resources=res(cpu=2, memory=4096, gpu=1))),
    max_run_seconds=7200,
)
TENSORFLOW_OVERRIDES = spec_plan(
    Framework.TENSORFLOW,
    master=ReplicaTemplate(resources=res(cpu=1, memory=1024)),
    topology=Topology(
        n_workers=2,
        n_ps=1,
        default_worker=ReplicaTemplate(resources=res(cpu=2, memory=2048)),
        worker={1: ReplicaTemplate(resources=res(cpu=4, memory=8192))},
        default_ps=ReplicaTemplate(resources=res(cpu=1, memory=1024)),
    ),
)
PLACED = spec_plan(
    Framework.PYTORCH,
    master=ReplicaTemplate(resources=res(cpu=1, memory=512), node_selector={"pool": "cpu"}),
    topology=Topology(
        n_workers=2,
        default_worker=ReplicaTemplate(
            resources=res(gpu=1),
            node_selector={"pool": "gpu"},
            tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        ),
    ),
    max_restarts=2,
    max_run_seconds=3600,
)
TF_KUBEFLOW = spec_plan(
    Framework.TENSORFLOW,
    backend=BackendKind.KUBEFLOW,
    topology=Topology(n_workers=2, n_ps=1, default_worker=ReplicaTemplate(resources=res(gpu=1))),
)
MXNET = spec_plan(Framework.MXNET, backend=BackendKind.KUBEFLOW, topology=Topology(n_workers=2, n_ps=1))
MPI = spec_plan(
    Framework.HOROVOD,
    backend=BackendKind.MPI,
    topology=Topology(n_workers=2, default_worker=ReplicaTemplate(resources=res(gpu=4))),
)
MULTIPROCESS = spec_plan(
    Framework.PYTORCH,
    backend=BackendKind.KUBEFLOW,
    master=ReplicaTemplate(resources=res(cpu=4, memory=8192)),
    topology=Topology(
        n_workers=1,
        processes_per_replica=2,
        default_worker=ReplicaTemplate(resources=res(cpu=4, memory=8192)),
    ),
    build=Build(pip_packages=("scikit-learn==1.9.1",)),
)
KUBE_ENVS = Cluster(
    name="k8s",
    kind="kubernetes",
    namespace="ml",
    server_url="http://phalanx.ml.svc:8000",
    env_volume="ml-envs",
)
TRAINER = Cluster(
    name="k8s",
    kind="kubernetes",
    namespace="ml",
    server_url="http://phalanx.ml.svc:8000",
    kubeflow_api="trainer-v2",
    env_volume="ml-envs",
)
RAY = Cluster(name="pool", kind="ray", address="gpu-box-1:6379", server_url="http://gpu-box-1:8000")
# one replica per node, asked the Kubernetes way: STRICT_SPREAD
SPREAD = spec_plan(
    Framework.PYTORCH,
    master=ReplicaTemplate(resources=res(cpu=2, memory=4096, gpu=1), affinity={"podAntiAffinity": {}}),
    topology=Topology(
        n_workers=1,
        default_worker=ReplicaTemplate(
            resources=res(cpu=2, memory=4096, gpu=1), affinity={"podAntiAffinity": {}}
        ),
    ),
)
MXNET_PACKAGES = spec_plan(
    Framework.MXNET,
    topology=Topology(n_workers=1, n_ps=1),
    build=Build(pip_packages=("mxnet==1.9.1", "numpy<1.24")),
)
RAY_SETTINGS = Settings(home="/home/user/.phalanx", token="golden-server-token")


def _slurm_horovod() -> str:
    from phalanx.backends import slurm

    slurm._MPI_PLUGINS["/golden/slurm.conf"] = "pmix"  # what srun --mpi=list would have offered
    backend = SlurmBackend(replace(SLURM, slurm_conf="/golden/slurm.conf"), SETTINGS)
    return backend.dry_run(replace(MPI, max_run_seconds=3600, max_restarts=1), CONTEXT).render()


CASES: dict[str, Callable[[], str]] = {
    "slurm-pytorch-ddp.sbatch": lambda: SlurmBackend(SLURM, SETTINGS).dry_run(PYTORCH, CONTEXT).render(),
    "slurm-tensorflow-heterogeneous.sbatch": lambda: (
        SlurmBackend(SLURM, SETTINGS).dry_run(TENSORFLOW_OVERRIDES, CONTEXT).render()
    ),
    # Horovod on GPUs: srun launches the ranks with pmix, --gres, --time with --signal, --requeue
    "slurm-horovod-gpu.sbatch": lambda: _slurm_horovod(),
    "kubernetes-pytorch.yaml": lambda: KubernetesBackend(SETTINGS, KUBE).dry_run(PLACED, CONTEXT).render(),
    "kubernetes-tensorflow.yaml": lambda: (
        KubernetesBackend(SETTINGS, KUBE).dry_run(TF_KUBEFLOW, CONTEXT).render()
    ),
    "kubeflow-pytorchjob.yaml": lambda: KubeflowBackend(SETTINGS, KUBE).dry_run(PLACED, CONTEXT).render(),
    "kubeflow-tfjob.yaml": lambda: KubeflowBackend(SETTINGS, KUBE).dry_run(TF_KUBEFLOW, CONTEXT).render(),
    "kubeflow-mxjob.yaml": lambda: KubeflowBackend(SETTINGS, KUBE).dry_run(MXNET, CONTEXT).render(),
    "kubeflow-mpijob.yaml": lambda: KubeflowBackend(SETTINGS, KUBE).dry_run(MPI, CONTEXT).render(),
    "kubeflow-pytorchjob-multiprocess.yaml": lambda: (
        KubeflowBackend(SETTINGS, KUBE_ENVS).dry_run(MULTIPROCESS, CONTEXT).render()
    ),
    "trainer-trainjob.yaml": lambda: (
        TrainerBackend(SETTINGS, TRAINER).dry_run(MULTIPROCESS, CONTEXT).render()
    ),
    # a placement group (STRICT_SPREAD: one replica per node) and each actor's env, token masked
    "ray-pytorch-spread.json": lambda: RayBackend(RAY_SETTINGS, RAY).dry_run(SPREAD, CONTEXT).render(),
    # PACK, a parameter-server topology, and the environment built once per node
    "ray-mxnet-pack.json": lambda: RayBackend(SETTINGS, RAY).dry_run(MXNET_PACKAGES, CONTEXT).render(),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_render_matches_the_pinned_golden_file(name: str) -> None:
    rendered = CASES[name]()
    path = GOLDEN / name
    if os.environ.get("PHALANX_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"no golden file {path}; create it with PHALANX_UPDATE_GOLDEN=1"
    assert rendered == path.read_text(), (
        f"{name} changed; if intended, regenerate with PHALANX_UPDATE_GOLDEN=1"
    )
