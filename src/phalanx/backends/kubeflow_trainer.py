"""The Kubeflow Trainer v2 engine: one ``TrainJob`` (trainer.kubeflow.org/v1alpha1) per experiment.

Trainer v2 replaces the v1 job kinds with a TrainJob that names a training runtime (a
``ClusterTrainingRuntime`` the platform team installs, ``torch-distributed`` for PyTorch) and says
only what is the user's: image, command, nodes, processes per node, resources per node. The runtime
owns the rest (a JobSet of ``node`` pods, the ``PET_*`` variables torchrun reads). Chosen per cluster
with ``phalanx cluster add ... --kubeflow-api trainer-v2``.

What it can express: PyTorch with every node alike (master and workers share one template) — the
runtimes Trainer ships have no TensorFlow, MXNet or parameter-server topology, and an MPI runtime
here would be DeepSpeed's, so those are refused with the reason (the v1 API runs them). Every node
runs the slot launcher, which gives each process its rank and each node its replica name (node 0 is
the master). Code and environment: ``runtimePatches`` can add volumes and mounts but no containers,
so the fetch-code/build-env steps run at the head of the trainer's command (``kube_code.inline_setup``).
The job is validated against the TrainJob CRD's own schema (``schemas/``, Trainer v2.3.0).
Each start of a node pod asks the server for its ``PHALANX_ATTEMPT`` (``podattempt.py``), named
for the node's replica, since the JobSet restarts nodes without Phalanx.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from phalanx.backends import kube_code
from phalanx.backends.base import DryRun, JobStatus, LaunchContext, ReplicaStatus, expect_dry_run
from phalanx.backends.kube_api import selector
from phalanx.backends.kube_objects import KubeDryRun, env_list, image, labels, prefix, resources
from phalanx.backends.kubeflow import SCHEMAS, _strict
from phalanx.backends.kubernetes import KubeEngine, pod_status
from phalanx.domain import ExperimentStatus, Framework, ReplicaState
from phalanx.errors import NotFound, Problem, SpecError
from phalanx.plan import Plan

log = logging.getLogger(__name__)

KIND = "TrainJob"
API_VERSION = "trainer.kubeflow.org/v1alpha1"
CRD = "trainer.kubeflow.org_trainjobs.yaml"
RUNTIMES = {Framework.PYTORCH: "torch-distributed"}  # Trainer's own ClusterTrainingRuntime names
NODE_JOB = "node"  # the runtime's replicated job (and container) that runs the trainer
PATCH_MANAGER = "phalanx.dev/phalanx"
LABEL_JOBSET = "jobset.sigs.k8s.io/jobset-name"
LABEL_INDEX = "batch.kubernetes.io/job-completion-index"

# TrainJob condition (status True) -> experiment status; pods refine STARTING into RUNNING.
CONDITIONS: dict[str, ExperimentStatus] = {
    "Created": ExperimentStatus.STARTING,
    "Suspended": ExperimentStatus.STARTING,
    "Complete": ExperimentStatus.SUCCEEDED,
    "Failed": ExperimentStatus.FAILED,  # a node failed past the runtime's backoff, or the deadline passed
}


def render_trainjob(
    plan: Plan,
    experiment_id: str,
    namespace: str,
    env: Mapping[str, str],
    *,
    server_url: str | None,
    env_volume: str | None,
    workdir: str | None = None,
) -> dict[str, Any]:
    """The TrainJob for the plan, validated; SpecError for what Trainer v2 cannot express."""
    url = kube_code.bundle_url(kube_code.require_server(server_url, "Kubeflow Trainer"), experiment_id)
    kube_code.check_environment(plan, env_volume, workdir)
    runtime = RUNTIMES.get(plan.framework) if plan.framework else None
    problems = []
    if runtime is None or any(r.rank is None for r in plan.replicas):
        problems.append(
            f"Kubeflow Trainer v2 runs PyTorch jobs here (runtime torch-distributed); "
            f"{plan.framework or 'a plain command'} with this topology has no Trainer runtime: register "
            f"the cluster with --kubeflow-api v1 to run it as a training-operator job"
        )
    first = plan.replicas[0]
    if any(
        (r.resources, r.processes, dict(r.node_selector))
        != (first.resources, first.processes, dict(first.node_selector))
        for r in plan.replicas
    ):
        problems.append(
            "a TrainJob has one template for every node: give the master and the workers the same "
            "resources, processes and node selector (or use --kubeflow-api v1)"
        )
    if problems:
        raise SpecError([Problem(p) for p in problems])
    nodes = len(plan.replicas)
    node_env = {
        **env,
        "PHALANX_EXPERIMENT_ID": experiment_id,
        "PHALANX_COMMAND": plan.command,
        "PHALANX_PROCESSES": str(first.processes),
    }
    run = kube_code.replica_command(plan, f"exec python {kube_code.SLOTS}", workdir)
    trainer: dict[str, Any] = {
        "image": image(plan),
        "command": ["/bin/sh", "-c", f"{kube_code.inline_setup(plan, url, workdir)} && {run}"],
        "numNodes": nodes,
        "numProcPerNode": first.processes,
        "env": env_list(node_env, token="PHALANX_HOST" in env),
    }
    if resources(first):
        trainer["resourcesPerNode"] = resources(first)
    pod_patch: dict[str, Any] = {
        "volumes": kube_code.volumes(plan, env_volume, workdir),
        "containers": [{"name": NODE_JOB, "volumeMounts": kube_code.mounts(plan, env_volume, workdir)}],
    }
    spec: dict[str, Any] = {
        "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": runtime},
        "trainer": trainer,
        "runtimePatches": [
            {
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {"name": NODE_JOB, "template": {"spec": {"template": {"spec": pod_patch}}}}
                            ]
                        }
                    }
                },
            }
        ],
    }
    if plan.max_run_seconds:
        spec["activeDeadlineSeconds"] = max(1, int(plan.max_run_seconds))
    job = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": prefix(experiment_id), "namespace": namespace, "labels": labels(experiment_id)},
        "spec": spec,
    }
    validate_trainjob(job)
    return job


def trainjob_problems(job: Mapping[str, Any]) -> list[str]:
    """What the API server would refuse in ``job`` by the TrainJob CRD's schema (strict fields)."""
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in sorted(_validator().iter_errors(job), key=lambda e: list(e.absolute_path))
    ]


def validate_trainjob(job: Mapping[str, Any]) -> None:
    problems = trainjob_problems(job)
    if problems:
        raise SpecError([Problem(f"TrainJob would be refused: {p}") for p in problems])


_VALIDATOR: Any = None


def _validator() -> Any:
    global _VALIDATOR
    if _VALIDATOR is None:
        import jsonschema  # why: jsonschema is optional (the `kubernetes` extra)

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        crd = yaml.load((SCHEMAS / CRD).read_text(), Loader=loader)
        version = next(v for v in crd["spec"]["versions"] if v.get("storage", True))
        _VALIDATOR = jsonschema.Draft7Validator(_strict(version["schema"]["openAPIV3Schema"]))
    return _VALIDATOR


class TrainerBackend(KubeEngine):
    """Creates and follows one TrainJob; ``api`` defaults to the official client (kubeconfig)."""

    name = "trainer"
    restarts_itself = True  # the runtime's JobSet restarts failed nodes itself

    def dry_run(self, plan: Plan, context: LaunchContext) -> DryRun:
        return self.kube_dry_run(plan, context, render_trainjob)

    def submit(self, dry_run: DryRun) -> str:
        objects = expect_dry_run(dry_run, KubeDryRun, self.name).objects
        job = copy.deepcopy(dict(objects[0]))
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        if self.api.get(ns, KIND, name) is not None:
            self.api.delete(ns, KIND, name)  # a resubmit: the last attempt's job goes first
        self.create_operator_job(ns, job, dry_run.context, objects[1:])
        return f"{ns}/{dry_run.context.experiment_id}"

    @staticmethod
    def _split(handle: str) -> tuple[str, str]:
        ns, sep, exp = handle.partition("/")
        if not sep or not exp:
            raise NotFound(f"{handle!r} is not a TrainJob handle (<namespace>/<experiment id>)")
        return ns, exp

    def _pods(self, ns: str, exp: str) -> dict[str, dict[str, Any]]:
        """Node pods by replica name: completion index 0 is the master, i is worker-(i-1)."""
        out: dict[str, dict[str, Any]] = {}
        for pod in self.api.list_pods(ns, selector({LABEL_JOBSET: prefix(exp)})):
            index = (pod["metadata"].get("labels") or {}).get(LABEL_INDEX, "0")
            name = "master" if index == "0" else f"worker-{int(index) - 1}"
            out[name] = pod
        return out

    def describe(self, handle: str) -> JobStatus | None:
        ns, exp = self._split(handle)
        job = self.api.get(ns, KIND, prefix(exp))
        if job is None:
            return None
        true = [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
        terminal = [c for c in true if c.get("type") in ("Complete", "Failed")]
        current = terminal[-1] if terminal else (true[-1] if true else None)
        status = (
            CONDITIONS.get(current["type"], ExperimentStatus.UNKNOWN) if current else ExperimentStatus.CREATED
        )
        pods = self._pods(ns, exp)
        nodes = int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)
        expected = ["master", *[f"worker-{i}" for i in range(nodes - 1)]]
        replicas = tuple(
            pod_status(n, pods[n]) if n in pods else ReplicaStatus(n, ReplicaState.PENDING) for n in expected
        )
        if status is ExperimentStatus.STARTING and any(r.state is ReplicaState.RUNNING for r in replicas):
            status = ExperimentStatus.RUNNING
        reason = (current or {}).get("message") or None if status is ExperimentStatus.FAILED else None
        return JobStatus(status, replicas, reason)

    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]:
        ns, exp = self._split(handle)
        pod = self._pods(ns, exp).get(replica)
        if pod is not None:  # the runtime names its pods: only one that exists can be read
            name = pod["metadata"]["name"]
            yield from self.pod_lines(handle, ns, name, follow, gone=lambda exc: exc.status in (400, 404))

    def cancel(self, handle: str) -> None:
        """Delete the TrainJob; its JobSet and pods go with it. Idempotent."""
        ns, exp = self._split(handle)
        self.delete_operator_job(handle, ns, KIND, exp)
