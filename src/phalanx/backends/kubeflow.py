"""The Kubeflow engine (`backend: kubeflow`, `backend: mpi`): one training-operator job per experiment.

PyTorchJob (pytorch), TFJob (tensorflow), MXJob (mxnet) — the training operator's kubeflow.org/v1 —
or MPIJob (horovod, `backend: mpi`) — the MPI operator's kubeflow.org/v2beta1, whose launcher runs
``mpirun`` over the workers' sshd with the Phalanx master as rank 0 (``runLauncherAsWorker``) —
rendered from the same Plan: one replica spec per role (the operator sets the framework wiring itself), the
tracking variables per pod through the downward API, ``runPolicy`` (cleanPodPolicy Running,
backoffLimit = max_restarts, activeDeadlineSeconds = max_run_seconds, schedulingPolicy.minAvailable
= every replica, for gang scheduling). A job is validated before anything is created: against its
CRD's own openAPIV3Schema (shipped in ``backends/schemas``) as the API server does with strict field
validation (unknown fields are errors), plus the rules the operator enforces beyond the schema
(replica type names, one Master/Chief/Scheduler/Launcher, its default container name). A role has
one pod template, so per-index overrides that differ within a role are refused with the reason.

The operator and the kubelet restart failed pods without Phalanx (``restarts_itself``): every start
of a pod's main container asks the server for its ``PHALANX_ATTEMPT`` (``kube_code.ATTEMPT_LINE``,
``podattempt.py``; an MPIJob's launcher passes it to every rank), so a restarted replica's
re-reported steps replace its earlier ones in the store instead of being appended again.
"""

from __future__ import annotations

import copy
import functools
import logging
import shlex
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from phalanx import frameworks
from phalanx.backends import kube_code
from phalanx.backends.base import DryRun, JobStatus, LaunchContext, ReplicaStatus, expect_dry_run
from phalanx.backends.kube_api import KubeError, selector
from phalanx.backends.kube_objects import (
    PORT,
    KubeDryRun,
    env_list,
    image,
    labels,
    placement,
    prefix,
    resources,
)
from phalanx.backends.kubernetes import KubeEngine, pod_status
from phalanx.domain import ExperimentStatus, Framework, ReplicaState, Role
from phalanx.errors import BackendUnavailable, NotFound, Problem, SpecError
from phalanx.extras import require
from phalanx.frameworks import mpi
from phalanx.plan import Plan, ReplicaPlan

log = logging.getLogger(__name__)
SCHEMAS = Path(__file__).resolve().parent / "schemas"

# kind -> (CRD file, replica-specs field, default container name, plan role -> replica type)
JOB_KINDS: dict[str, tuple[str, str, str, dict[Role, str]]] = {
    "PyTorchJob": (
        "kubeflow.org_pytorchjobs.yaml",
        "pytorchReplicaSpecs",
        "pytorch",
        {Role.MASTER: "Master", Role.WORKER: "Worker"},
    ),
    "TFJob": (
        "kubeflow.org_tfjobs.yaml",
        "tfReplicaSpecs",
        "tensorflow",
        {Role.MASTER: "Chief", Role.WORKER: "Worker", Role.PS: "PS"},
    ),
    "MXJob": (
        "kubeflow.org_mxjobs.yaml",
        "mxReplicaSpecs",
        "mxnet",
        {Role.MASTER: "Scheduler", Role.WORKER: "Worker", Role.PS: "Server"},
    ),
    "MPIJob": (
        "kubeflow.org_mpijobs.v2beta1.yaml",
        "mpiReplicaSpecs",
        "mpi",
        {Role.MASTER: "Launcher", Role.WORKER: "Worker"},
    ),
}
# The operator's own rules (training-operator v1.8 validation): allowed replica types, and the
# types that must have exactly one replica.
ALLOWED_TYPES = {
    "PyTorchJob": {"Master", "Worker"},
    "TFJob": {"Chief", "Master", "Worker", "PS", "Evaluator"},
    "MXJob": {"Scheduler", "Server", "Worker", "TunerTracker", "TunerServer", "Tuner"},
    "MPIJob": {"Launcher", "Worker"},
}
SINGLE = {"Master", "Chief", "Scheduler", "Launcher", "Evaluator"}
REQUIRED = {"MXJob": "Scheduler", "MPIJob": "Launcher"}

# Job condition (the newest with status True) -> experiment status. Anything else: UNKNOWN.
JOB_CONDITIONS: dict[str, ExperimentStatus] = {
    "Created": ExperimentStatus.STARTING,  # accepted by the operator, pods being created
    "Suspended": ExperimentStatus.STARTING,  # runPolicy.suspend: no pods until resumed
    "Running": ExperimentStatus.RUNNING,
    "Restarting": ExperimentStatus.RUNNING,  # pods restarted within backoffLimit
    "Succeeded": ExperimentStatus.SUCCEEDED,
    "Failed": ExperimentStatus.FAILED,  # a replica failed past backoffLimit, or the deadline passed
}
LABEL_JOB = "training.kubeflow.org/job-name"
LABEL_TYPE = "training.kubeflow.org/replica-type"
LABEL_INDEX = "training.kubeflow.org/replica-index"


def job_kind(plan: Plan) -> str:
    if frameworks.uses_mpi(plan):
        return "MPIJob"
    return {Framework.TENSORFLOW: "TFJob", Framework.MXNET: "MXJob"}.get(plan.framework, "PyTorchJob")  # type: ignore[arg-type]


def _template_key(r: ReplicaPlan) -> tuple[Any, ...]:
    return (r.resources, dict(r.node_selector), r.affinity, r.tolerations, r.processes)


def check_expressible(plan: Plan, kind: str) -> None:
    """A Kubeflow job has one pod template per role: refuse what it cannot say, naming why."""
    problems = []
    types = JOB_KINDS[kind][3]
    for role in Role:
        members = [r for r in plan.replicas if r.role is role]
        if not members:
            continue
        if role not in types:
            problems.append(
                f"a {kind} has no place for {role} replicas ({len(members)} asked): "
                f"remove them or use another framework/backend"
            )
            continue
        first = members[0]
        for r in members[1:]:
            if _template_key(r) != _template_key(first):
                problems.append(
                    f"environment.replicas: {r.name} differs from {first.name}, but a {kind} has one pod "
                    f"template per role; make the per-index overrides of {role} equal, or run it on "
                    f"Slurm (heterogeneous jobs) or with backend: native"
                )
                break
    if problems:
        raise SpecError([Problem(p) for p in problems])


def _replica_env(plan: Plan, role: Role, experiment_id: str, env: Mapping[str, str]) -> list[dict[str, Any]]:
    """PHALANX_* per pod: the index comes from the operator's label through the downward API."""
    out = env_list(env, token="PHALANX_HOST" in env)
    out += [
        {"name": "PHALANX_EXPERIMENT_ID", "value": experiment_id},
        {"name": "PHALANX_ROLE", "value": str(role)},
        {
            "name": "PHALANX_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{LABEL_INDEX}']"}},
        },
        {"name": "PHALANX_REPLICA", "value": "master" if role is Role.MASTER else f"{role}-$(PHALANX_INDEX)"},
    ]
    if role is Role.MASTER:
        out.append({"name": "PHALANX_RANK", "value": "0"})
    elif role is Role.PS:
        out.append({"name": "PHALANX_RANK", "value": ""})
    return out


def _input_env(item: Any) -> str | None:
    """PHALANX_INPUT_<NAME> of an input, resolved (a lineage record) or as written (an InputSpec)."""
    return item.get("env") if isinstance(item, Mapping) else getattr(item, "env", None)


def _mpi_launch(plan: Plan, experiment_id: str, namespace: str) -> str:
    """The launcher's command: mpirun over every slot of the hostfile the MPI operator writes
    (launcher first, then the workers; ``-map-by slot`` fills the master's slots with ranks 0..k-1),
    forwarding what every rank needs (``-x``), each rank mapped to its replica by the wrapper."""
    job = prefix(experiment_id)
    master = f"{job}-launcher.{job}.{namespace}.svc"  # the operator's launcher hostname + job Service
    forwarded = [
        "PHALANX_COMMAND",
        "PHALANX_PROCESSES",
        "PHALANX_EXPERIMENT_ID",
        "PHALANX_HOST",
        "PHALANX_TOKEN",
        "PHALANX_CAPTURED",
        "PHALANX_ATTEMPT",  # the launcher's start: every rank restarts with it (mpirun)
        "PYTHONPATH",
        "PATH",
        "MASTER_ADDR",
        "MASTER_PORT",
        # each input's path (every pod's fetch-inputs put it at the same one): ranks start over ssh
        *sorted({str(e) for e in (_input_env(i) for i in plan.inputs) if e}),
    ]
    argv = [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(plan.world_size),
        "--map-by",
        "slot",
        "--bind-to",
        "none",
        "-wdir",
        kube_code.CODE_DIR,
    ]
    for name in forwarded:
        argv += ["-x", name]
    exports = (
        f"export MASTER_ADDR={master} MASTER_PORT={PORT} "
        f"PHALANX_PROCESSES={plan.replicas[0].processes} PHALANX_COMMAND={shlex.quote(plan.command)}"
    )
    wrapper = shlex.quote(mpi.RANK_WRAPPER)
    return f"{exports}; {shlex.join(argv)} /bin/sh -c {wrapper}"


def render_job(
    plan: Plan,
    experiment_id: str,
    namespace: str,
    env: Mapping[str, str],
    *,
    server_url: str | None = None,
    env_volume: str | None = None,
    workdir: str | None = None,
) -> dict[str, Any]:
    """The training-operator job for the plan, validated; SpecError for what it cannot express.

    Every pod brings its code and environment through init containers (``kube_code``); a PyTorch
    pod with k processes runs them through the slot launcher; an MPIJob's launcher runs mpirun.
    """
    url = kube_code.bundle_url(kube_code.require_server(server_url, "Kubeflow"), experiment_id)
    kube_code.check_environment(plan, env_volume, workdir)
    kind = job_kind(plan)
    check_expressible(plan, kind)
    _, field, container, types = JOB_KINDS[kind]
    specs: dict[str, Any] = {}
    processes = max(r.processes for r in plan.replicas)
    for role in Role:
        members = [r for r in plan.replicas if r.role is role]
        if not members:
            continue
        r = members[0]
        c: dict[str, Any] = {"name": container, "image": image(plan)}
        replica_env = _replica_env(plan, role, experiment_id, env)
        if kind == "MPIJob" and role is Role.WORKER:
            c["command"] = ["/usr/sbin/sshd", "-De"]  # ranks arrive over ssh from the launcher's mpirun
        elif kind == "MPIJob":
            c["command"] = [
                "/bin/sh",
                "-c",
                kube_code.replica_command(plan, _mpi_launch(plan, experiment_id, namespace), workdir),
            ]
        else:
            command = plan.command
            if kind == "PyTorchJob" and processes > 1:
                # The operator sets PET_NNODES/PET_NODE_RANK/PET_NPROC_PER_NODE; the slot launcher starts
                # the processes with their ranks (torchrun's job, without asking the user to call it).
                replica_env.append({"name": "PHALANX_COMMAND", "value": plan.command})
                command = f"exec python {kube_code.SLOTS}"
            if role is Role.WORKER:  # worker i is rank i + 1 (Polyaxon's and torchrun's numbering)
                command = f'export PHALANX_RANK="$((PHALANX_INDEX + 1))"; {command}'
            c["command"] = ["/bin/sh", "-c", kube_code.replica_command(plan, command, workdir)]
        c["env"] = replica_env
        if resources(r):
            c["resources"] = resources(r)
        pod_spec = kube_code.with_code(
            {"containers": [c], **placement(r)}, plan, image(plan), url, env_volume, workdir
        )
        specs[types[role]] = {
            "replicas": len(members),
            "restartPolicy": "OnFailure" if plan.max_restarts else "Never",
            "template": {"metadata": {"labels": labels(experiment_id)}, "spec": pod_spec},
        }
    run_policy: dict[str, Any] = {
        "cleanPodPolicy": "Running",  # stop what still runs when the job ends; keep the rest for logs
        "backoffLimit": plan.max_restarts,
        "schedulingPolicy": {"minAvailable": len(plan.replicas)},  # gang: all replicas or none
    }
    if plan.max_run_seconds:
        run_policy["activeDeadlineSeconds"] = max(1, int(plan.max_run_seconds))
    spec: dict[str, Any] = {field: specs, "runPolicy": run_policy}
    if kind == "PyTorchJob" and processes > 1:
        spec["nprocPerNode"] = str(processes)  # WORLD_SIZE and PET_NPROC_PER_NODE count processes
    if kind in ("TFJob", "MXJob") and processes > 1:
        raise SpecError(f"a {kind} runs one process per replica; processes_per_replica must be 1 here")
    if kind == "MXJob":
        spec["jobMode"] = "MXTrain"
    if kind == "MPIJob":
        spec["slotsPerWorker"] = processes
        spec["runLauncherAsWorker"] = True  # the master is rank 0, as on every other engine
        spec["mpiImplementation"] = "OpenMPI"
        spec["launcherCreationPolicy"] = "WaitForWorkersReady"
        run_policy["cleanPodPolicy"] = "Running"
    job = {
        "apiVersion": "kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": prefix(experiment_id), "namespace": namespace, "labels": labels(experiment_id)},
        "spec": spec,
    }
    validate_job(job)
    return job


# -- validation ---------------------------------------------------------------------------------
def _strict(schema: Any) -> Any:
    """OpenAPI v3 (structural) -> JSON Schema that rejects unknown fields, as the API server does
    with strict field validation; x-kubernetes-preserve-unknown-fields keeps a node open."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


@functools.cache
def crd_validator(kind: str) -> Any:
    jsonschema = require("jsonschema", "kubernetes", "checking Kubeflow jobs")

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((SCHEMAS / JOB_KINDS[kind][0]).read_text(), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v.get("storage", True))
    schema = _strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def job_problems(job: Mapping[str, Any]) -> list[str]:
    """Everything the API server and the operator would refuse in ``job`` (empty: it is fine)."""
    kind = job.get("kind", "")
    if kind not in JOB_KINDS:
        return [f"kind {kind!r} is not a Kubeflow training job"]
    problems = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in sorted(crd_validator(kind).iter_errors(job), key=lambda e: list(e.absolute_path))
    ]
    _, field, container, _ = JOB_KINDS[kind]
    specs = (job.get("spec") or {}).get(field) or {}
    if not specs:
        problems.append(f"spec.{field}: at least one replica type is required")
    for rtype, rs in specs.items():
        where = f"spec.{field}.{rtype}"
        if rtype not in ALLOWED_TYPES[kind]:
            problems.append(
                f"{where}: {rtype} is not a {kind} replica type ({', '.join(sorted(ALLOWED_TYPES[kind]))})"
            )
        if rtype in SINGLE and rs.get("replicas", 1) != 1:
            problems.append(f"{where}.replicas: there must be only 1 {rtype.lower()} replica")
        containers = ((rs.get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers:
            problems.append(f"{where}.template.spec.containers: at least one container is required")
        if any(not c.get("image") for c in containers):
            problems.append(f"{where}.template.spec.containers: every container needs an image")
        if containers and not any(c.get("name") == container for c in containers):
            problems.append(f"{where}: the operator needs a container named {container!r}")
    if kind == "TFJob" and {"Chief", "Master"} <= set(specs):
        problems.append(f"spec.{field}: a TFJob has either a Chief or a Master, not both")
    if kind in REQUIRED and REQUIRED[kind] not in specs:
        problems.append(f"spec.{field}: a {kind} needs a {REQUIRED[kind]}")
    return problems


def validate_job(job: Mapping[str, Any]) -> None:
    problems = job_problems(job)
    if problems:
        raise SpecError([Problem(f"{job.get('kind')} would be refused: {p}") for p in problems])


# -- the controller -----------------------------------------------------------------------------
class KubeflowBackend(KubeEngine):
    """Creates and follows one training-operator job; ``api`` defaults to the official client."""

    name = "kubeflow"
    # The operator restarts failed pods itself (runPolicy.backoffLimit = max_restarts); a supervisor
    # that honours this flag must not restart the group on top of it.
    restarts_itself = True

    def dry_run(self, plan: Plan, context: LaunchContext) -> DryRun:
        return self.kube_dry_run(plan, context, render_job)

    def submit(self, dry_run: DryRun) -> str:
        objects = expect_dry_run(dry_run, KubeDryRun, self.name).objects
        job = copy.deepcopy(dict(objects[0]))
        ns = job["metadata"]["namespace"]
        if self.api.get(ns, job["kind"], job["metadata"]["name"]) is not None:
            # a job of the same experiment is still there (a resubmit): it goes first
            self.api.delete(ns, job["kind"], job["metadata"]["name"])
            deadline = time.monotonic() + 120
            while self.api.get(ns, job["kind"], job["metadata"]["name"]) is not None:
                if time.monotonic() > deadline:
                    raise BackendUnavailable(
                        f"{job['kind']} {job['metadata']['name']} is still being deleted"
                    )
                time.sleep(0.5)
        self.create_operator_job(ns, job, dry_run.context, objects[1:])
        return f"{ns}/{job['kind']}/{dry_run.context.experiment_id}"

    @staticmethod
    def _split(handle: str) -> tuple[str, str, str]:
        parts = handle.split("/")
        if len(parts) != 3 or parts[1] not in JOB_KINDS:
            raise NotFound(f"{handle!r} is not a Kubeflow handle (<namespace>/<kind>/<experiment id>)")
        return parts[0], parts[1], parts[2]

    def _replica_name(self, kind: str, pod: Mapping[str, Any]) -> str | None:
        meta_labels = pod["metadata"].get("labels") or {}
        rtype, index = meta_labels.get(LABEL_TYPE, ""), meta_labels.get(LABEL_INDEX, "0")
        for role, t in JOB_KINDS[kind][3].items():
            if t.lower() == rtype.lower():
                return "master" if role is Role.MASTER else f"{role}-{index}"
        return None

    def describe(self, handle: str) -> JobStatus | None:
        ns, kind, exp = self._split(handle)
        job = self.api.get(ns, kind, prefix(exp))
        if job is None:
            return None
        conditions = [
            c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
        ]
        current = conditions[-1] if conditions else None
        terminal = [c for c in conditions if c.get("type") in ("Succeeded", "Failed")]
        if terminal:
            current = terminal[-1]
        status = (
            JOB_CONDITIONS.get(current["type"], ExperimentStatus.UNKNOWN)
            if current
            else ExperimentStatus.CREATED
        )
        pods = {
            self._replica_name(kind, p): p for p in self.api.list_pods(ns, selector({LABEL_JOB: prefix(exp)}))
        }
        spec = job["spec"][JOB_KINDS[kind][1]]
        expected = []
        for role, rtype in JOB_KINDS[kind][3].items():
            n = int((spec.get(rtype) or {}).get("replicas", 0))
            expected += ["master"] if role is Role.MASTER and n else [f"{role}-{i}" for i in range(n)]
        replicas = [
            pod_status(name, pods[name]) if name in pods else ReplicaStatus(name, ReplicaState.PENDING)
            for name in expected
        ]
        reason = current.get("message") or None if current and status is ExperimentStatus.FAILED else None
        return JobStatus(status, tuple(replicas), reason)

    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]:
        """The replica's pod console (the operator names pods <job>-<type>-<index>)."""
        ns, kind, exp = self._split(handle)
        role, _, index = replica.partition("-")
        rtype = JOB_KINDS[kind][3].get(Role(role)) if role in {r.value for r in Role} else None
        if rtype is None:
            return
        name = f"{prefix(exp)}-{rtype.lower()}-{index or 0}"

        def gone(exc: KubeError) -> bool:  # a pod not created yet is awaited while its job exists
            return exc.status == 404 and self.api.get(ns, kind, prefix(exp)) is None

        yield from self.pod_lines(handle, ns, name, follow, gone)

    def cancel(self, handle: str) -> None:
        """Delete the job; the operator's pods go with it (they are owned by the job). Idempotent.
        A finished job's pods are kept until this engine's log readers have their last lines."""
        ns, kind, exp = self._split(handle)
        self.delete_operator_job(handle, ns, kind, exp)
