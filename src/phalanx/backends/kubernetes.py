"""The Kubernetes engine (`backend: native`): one Pod per replica, headless Services for the names
the framework wiring uses, and a ConfigMap holding the plan that owns them all.

Render: every replica is a Pod (restartPolicy Never; requests/limits, GPUs as nvidia.com/gpu;
nodeSelector, affinity and tolerations from the file) labelled with its experiment, replica and
role. A headless Service per replica that the wiring names (MASTER_ADDR, TF_CONFIG's hosts,
DMLC_PS_ROOT_URI) gives it a stable DNS name. Every Pod and Service names the ConfigMap as its owner,
so deleting the ConfigMap (``cancel``) garbage-collects the experiment. The dry run holds a
placeholder owner uid; ``submit`` creates the ConfigMap first and fills in its real uid.

Controller: ``describe`` maps pod phases through ``POD_PHASES``; ``watch`` follows pod events and
enforces the gang rule itself (one replica failed: the others are stopped by setting their
activeDeadlineSeconds, which keeps their logs readable); ``logs`` reads a pod's console.
Pods never restart by themselves (restartPolicy Never); the supervisor's restarts are new pods,
whose start asks the server for its ``PHALANX_ATTEMPT`` like any Kubernetes pod (``podattempt.py``).
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from phalanx import frameworks
from phalanx.backends import kube_code
from phalanx.backends.base import (
    DryRun,
    JobStatus,
    LaunchContext,
    ReplicaStatus,
    expect_dry_run,
    job_status,
)
from phalanx.backends.kube_api import ClientAPI, KubeAPI, KubeError, selector
from phalanx.backends.kube_inputs import with_inputs
from phalanx.backends.kube_objects import (
    LABEL_REPLICA,
    PORT,
    KubeDryRun,
    LogReaders,
    env_list,
    hardened,
    image,
    labels,
    owner_reference,
    placement,
    prefix,
    resources,
    token_secret_name,
    validate_core,
    with_experiment_token,
)
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework, ReplicaState
from phalanx.errors import BackendUnavailable, NotFound, SpecError
from phalanx.frameworks import Endpoints
from phalanx.plan import Plan, ReplicaPlan
from phalanx.tokens import box_key

log = logging.getLogger(__name__)

STOP_ANNOTATION = "phalanx.dev/stopped"  # set on a pod the controller stopped (gang rule)

# Pod phase -> replica state (refined by container state below). Anything else: UNKNOWN.
POD_PHASES: dict[str, ReplicaState] = {
    "Pending": ReplicaState.PENDING,  # accepted, not yet scheduled or its image is being pulled
    "Running": ReplicaState.RUNNING,  # bound to a node, its container started
    "Succeeded": ReplicaState.SUCCEEDED,  # the container exited 0 (restartPolicy Never)
    "Failed": ReplicaState.FAILED,  # exited non-zero, OOMKilled, evicted, or past its deadline
    "Unknown": ReplicaState.UNKNOWN,  # the node stopped reporting
}
# Waiting reasons of a Pending pod that will never start by itself: fail fast instead of waiting.
STUCK = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
}
# Tracking variables that name paths on the submitting machine: meaningless inside a pod.
LOCAL_ONLY = {"PHALANX_HOME", "PHALANX_SPOOL", "PYTHONPATH", "PHALANX_TOKEN"}


def pod_env(plan: Plan, context: LaunchContext, server_url: str | None) -> dict[str, str]:
    """What every pod's tracking needs: the server to report to, and that the console is captured."""
    env = {k: v for k, v in context.tracking_env.items() if k not in LOCAL_ONLY}
    env["PHALANX_CAPTURED"] = "1"  # the kubelet keeps the console; the supervisor reads it via logs
    if server_url:
        env["PHALANX_HOST"] = server_url
    return {**plan.build.env_vars, **plan.env, **env}


def render_native(
    plan: Plan,
    experiment_id: str,
    namespace: str,
    env: Mapping[str, str],
    *,
    server_url: str | None = None,
    env_volume: str | None = None,
    workdir: str | None = None,
) -> list[dict[str, Any]]:
    """The ConfigMap (owner), the Services and the Pods, in the order they are created.

    Each pod fetches the experiment's code bundle (and builds its environment once per cluster)
    in init containers, then runs run.cmd in ``/phalanx/code``; with ``processes_per_replica: k``
    a PyTorch pod runs k processes through the slot launcher (see ``backends/slots.py``).
    """
    url = kube_code.bundle_url(kube_code.require_server(server_url, "Kubernetes"), experiment_id)
    kube_code.check_environment(plan, env_volume, workdir)
    _check_slots(plan)
    base = prefix(experiment_id)
    hosts = {r.name: f"{base}-{r.name}.{namespace}.svc" for r in plan.replicas}
    endpoints = Endpoints(hosts=hosts, ports={r.name: PORT for r in plan.replicas})
    pods: list[dict[str, Any]] = []
    wired: set[str] = set()
    token = "PHALANX_HOST" in env
    nodes = sum(1 for r in plan.replicas if r.rank is not None)
    for r in plan.replicas:
        renv, command = _replica_env(plan, r, experiment_id, env, endpoints, nodes)
        wired |= {name for name, host in hosts.items() if any(host in v for v in renv.values())}
        spec = _pod_spec(plan, r, renv, command, token=token, url=url, env_volume=env_volume, workdir=workdir)
        pods.append(_owned("Pod", f"{base}-{r.name}", namespace, experiment_id, r, spec))
    services = [
        _owned("Service", f"{base}-{r.name}", namespace, experiment_id, r, _headless(experiment_id, r))
        for r in plan.replicas
        if r.name in wired
    ]
    objects = [_owner(plan, experiment_id, namespace), *services, *pods]
    validate_core(objects)
    return objects


def _check_slots(plan: Plan) -> None:
    """Several processes per pod need PyTorch's per-process wiring (the slot launcher); refuse others."""
    if any(r.processes > 1 for r in plan.replicas) and plan.framework != Framework.PYTORCH:
        raise SpecError(
            f"processes_per_replica > 1 runs PyTorch processes in one pod (the slot launcher); "
            f"{plan.framework or 'a plain command'} has no per-process wiring: use one replica per process"
        )


def _owner(plan: Plan, experiment_id: str, namespace: str) -> dict[str, Any]:
    """The ConfigMap holding the plan: every other object names it as owner, so deleting it cancels all."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": prefix(experiment_id), "namespace": namespace, "labels": labels(experiment_id)},
        "data": {"plan.json": json.dumps(plan.to_json(), sort_keys=True), "experiment-id": experiment_id},
    }


def _replica_env(
    plan: Plan,
    r: ReplicaPlan,
    experiment_id: str,
    env: Mapping[str, str],
    endpoints: Endpoints,
    nodes: int,
) -> tuple[dict[str, str], str]:
    """One replica's environment and command: its wiring, and the slot launcher for k processes a pod."""
    renv = {
        **env,
        **frameworks.phalanx_env(experiment_id, r, {}, plan.params),
        **frameworks.framework_env(plan, r, endpoints),
    }
    command = plan.command
    if r.processes > 1:
        renv.update(
            PHALANX_COMMAND=plan.command,
            PHALANX_PROCESSES=str(r.processes),
            PHALANX_NODE_RANK=str(r.rank),
            PHALANX_NNODES=str(nodes),
        )
        command = f"exec python {kube_code.SLOTS}"
    return renv, command


def _pod_spec(
    plan: Plan,
    r: ReplicaPlan,
    renv: Mapping[str, str],
    command: str,
    *,
    token: bool,
    url: str,
    env_volume: str | None,
    workdir: str | None,
) -> dict[str, Any]:
    """A replica pod's spec: its container, placement, code-fetching init containers and deadline."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "replica",
                "image": image(plan),
                "command": ["/bin/sh", "-c", kube_code.replica_command(plan, command, workdir)],
                "env": env_list(renv, token=token),
                "ports": [{"name": "phalanx", "containerPort": PORT}],
                **({"resources": resources(r)} if resources(r) else {}),
            }
        ],
        **placement(r),
    }
    spec = kube_code.with_code(spec, plan, image(plan), url, env_volume, workdir)
    if plan.max_run_seconds:
        spec["activeDeadlineSeconds"] = max(1, int(plan.max_run_seconds))
    return spec


def _headless(experiment_id: str, r: ReplicaPlan) -> dict[str, Any]:
    """A headless Service's spec: a stable DNS name for a replica the wiring names, before readiness."""
    return {
        "clusterIP": "None",  # headless: the name resolves to the pod itself
        "publishNotReadyAddresses": True,  # resolvable before readiness: rendezvous needs it
        "selector": labels(experiment_id, r),
        "ports": [{"name": "phalanx", "port": PORT, "targetPort": PORT}],
    }


def _owned(
    kind: str, name: str, namespace: str, experiment_id: str, r: ReplicaPlan, spec: dict[str, Any]
) -> dict[str, Any]:
    """A replica's Pod or Service, labelled and owned by the ConfigMap (so ``cancel`` collects it)."""
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels(experiment_id, r),
            "ownerReferences": [owner_reference(prefix(experiment_id))],
        },
        "spec": spec,
    }


def _time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_status(name: str, pod: Mapping[str, Any] | None) -> ReplicaStatus:
    """One replica's state from its pod (None: the pod is gone)."""
    if pod is None:
        return ReplicaStatus(name, ReplicaState.STOPPED, reason="its pod was deleted")
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    state = POD_PHASES.get(phase, ReplicaState.UNKNOWN)
    host = (pod.get("spec") or {}).get("nodeName")
    containers = status.get("containerStatuses") or []
    cstate = (containers[0].get("state") or {}) if containers else {}
    terminated = cstate.get("terminated") or {}
    waiting = cstate.get("waiting") or {}
    code = terminated.get("exitCode")
    reason = terminated.get("reason") or status.get("reason") or waiting.get("reason")
    finished = _time(terminated.get("finishedAt"))
    if state is ReplicaState.PENDING and waiting.get("reason") in STUCK:
        state, reason = (
            ReplicaState.FAILED,
            f"cannot start: {waiting.get('reason')} {waiting.get('message', '')}",
        )
    elif state is ReplicaState.PENDING and (host or waiting):
        state = ReplicaState.STARTING
    if meta.get("deletionTimestamp") and not state.done:
        state, reason = ReplicaState.STOPPED, "its pod is being deleted"
    stopped_by = (meta.get("annotations") or {}).get(STOP_ANNOTATION)
    if stopped_by and state is ReplicaState.FAILED:
        state, reason = ReplicaState.STOPPED, stopped_by
    elif state is ReplicaState.FAILED and code is not None and reason in (None, "Error"):
        reason = f"exited with code {code}"
    return ReplicaStatus(name, state, host=host, exit_code=code, reason=reason, finished_at=finished)


class KubeEngine:
    """What both Kubernetes engines share: the cluster, its namespace, the API (the official client
    from kubeconfig unless one is given, e.g. a fake in tests) and the log readers."""

    name: str  # each engine's own ("kubernetes", "kubeflow", "trainer")
    restarts_itself = False  # plain pods; the training operators' engines (below) say True

    def __init__(
        self,
        settings: Settings | None = None,
        cluster: Cluster | None = None,
        api: KubeAPI | None = None,
        put_code: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.cluster = cluster or Cluster(name="kubernetes", kind="kubernetes")
        self.namespace = self.cluster.namespace or "default"
        self._api = api
        self._put_code = put_code or self._http_put
        self._readers = LogReaders()

    @property
    def api(self) -> KubeAPI:
        if self._api is None:
            self._api = ClientAPI(self.cluster.context)
        return self._api

    def kube_dry_run(
        self,
        plan: Plan,
        context: LaunchContext,
        render: Callable[..., Mapping[str, Any] | list[dict[str, Any]]],
    ) -> KubeDryRun:
        """The engine's dry run: ``render`` (its own render function) given this cluster's namespace,
        the pods' environment, the server URL and the environments volume; owner object first."""
        rendered = render(
            plan,
            context.experiment_id,
            self.namespace,
            pod_env(plan, context, self.cluster.server_url),
            server_url=self.cluster.server_url,
            env_volume=self.cluster.env_volume,
            workdir=context.workdir,
        )
        objects: list[Mapping[str, Any]] = list(rendered) if isinstance(rendered, list) else [rendered]
        if context.input_fetches:  # every pod fetches the download inputs first (kube_inputs)
            if self.name == "trainer":
                raise SpecError(
                    "inputs in download mode: Kubeflow Trainer v2 cannot add the fetch-inputs init "
                    "container (runtimePatches take no init containers); use --kubeflow-api v1, or a "
                    "datastore on a volume every pod mounts (mode: mount)"
                )
            objects = list(
                with_inputs(objects, context.input_fetches, self.cluster.server_url, context.experiment_id)
            )
        iso = context.isolation
        # a server's boxed run: its token under the box key (the server's own token stays the server's)
        key = box_key(self.settings.home) if iso is not None else self.settings.token
        if key and self.cluster.server_url:
            objects = with_experiment_token(objects, context.experiment_id, self.namespace, key)
        if iso is not None:
            objects = hardened(objects, iso.uid, iso.gid, self.cluster.service_account)
        return KubeDryRun(backend=self.name, plan=plan, context=context, objects=tuple(objects))

    def create_token_secret(self, namespace: str, objects: Sequence[Mapping[str, Any]]) -> None:
        """Create the dry run's per-experiment token Secret, if any, before the job that reads it
        (Kubeflow jobs own their pods, not this Secret: ``delete_token_secret`` at cancel)."""
        for obj in objects:
            if obj["kind"] == "Secret":
                self.api.delete(namespace, "Secret", obj["metadata"]["name"])  # a resubmit's
                try:
                    self.api.create(namespace, copy.deepcopy(dict(obj)))
                except KubeError as exc:
                    raise BackendUnavailable(
                        f"creating Secret {obj['metadata']['name']} failed: {exc}"
                    ) from exc

    def delete_token_secret(self, namespace: str, experiment_id: str) -> None:
        self.api.delete(namespace, "Secret", token_secret_name(experiment_id))

    def create_operator_job(
        self, namespace: str, job: dict[str, Any], context: LaunchContext, rest: Sequence[Mapping[str, Any]]
    ) -> None:
        """The Kubeflow engines' submit, once a resubmit's old job is gone: the code uploaded, the
        token Secret among ``rest`` created before the job that reads it, then the job. A job the
        cluster refuses leaves no Secret behind (BackendUnavailable)."""
        self.upload_code(context)
        self.create_token_secret(namespace, rest)
        try:
            self.api.create(namespace, job)
        except KubeError as exc:
            self.delete_token_secret(namespace, context.experiment_id)  # nothing half-created stays
            raise BackendUnavailable(
                f"creating {job['kind']} {job['metadata']['name']} failed: {exc}"
            ) from exc

    def describe(self, handle: str) -> JobStatus | None:
        raise NotImplementedError  # each engine's own

    def delete_operator_job(self, handle: str, namespace: str, kind: str, experiment_id: str) -> None:
        """The Kubeflow engines' cancel: delete the operator's job (its pods are owned by it and go
        with it), then the experiment's token Secret. A finished job is kept until this engine's log
        readers have their last lines. Idempotent."""
        status = self.describe(handle)
        if status is None:
            self.delete_token_secret(namespace, experiment_id)
            return
        if status.status.done:
            self._readers.wait_closed(handle)
        self.api.delete(namespace, kind, prefix(experiment_id))
        self.delete_token_secret(namespace, experiment_id)

    def pod_lines(
        self, handle: str, namespace: str, pod: str, follow: bool, gone: Callable[[KubeError], bool]
    ) -> Iterator[str]:
        """A pod's console, read as one of this engine's log readers (``cancel`` lets them take
        the last lines before deleting the pod). Without ``follow``: what it has now, nothing when
        it has no log. With ``follow``: to its end; a pod not created (404) or not started (400)
        yet is waited for until ``gone(error)`` says it never will be; other errors raise."""
        self._readers.enter(handle)
        try:
            while True:
                try:
                    yield from self.api.pod_log(namespace, pod, follow)
                    return
                except KubeError as exc:
                    if not follow or gone(exc):
                        return
                    if exc.status not in (400, 404):
                        raise
                time.sleep(0.2)
        finally:
            self._readers.leave(handle)

    def refuse_if_it_can_never_run(self, dry_run: DryRun) -> None:
        """Nothing to ask before the job: the cluster's scheduler places its pods when it runs."""

    def upload_code(self, context: LaunchContext) -> str:
        """Pack the experiment's folder and the tracking SDK and store them on the cluster's server,
        where the pods' fetch-code step finds them; returns the URL. BackendUnavailable when the
        server does not take it (nothing is created on the cluster then)."""
        url = kube_code.bundle_url(
            kube_code.require_server(self.cluster.server_url, "Kubernetes"), context.experiment_id
        )
        data = kube_code.pack(context.workdir, self.settings)
        self._put_code(url, data)
        log.info("code bundle: %d bytes at %s", len(data), url)
        return url

    def _http_put(self, url: str, data: bytes) -> None:
        kube_code.put_bundle(url, data, self.settings.token)


class KubernetesBackend(KubeEngine):
    """Pods and Services through the API; ``api`` defaults to the official client (kubeconfig)."""

    name = "kubernetes"

    def dry_run(self, plan: Plan, context: LaunchContext) -> DryRun:
        return self.kube_dry_run(plan, context, render_native)

    def submit(self, dry_run: DryRun) -> str:
        objects = copy.deepcopy([dict(o) for o in expect_dry_run(dry_run, KubeDryRun, self.name).objects])
        owner, rest = objects[0], objects[1:]
        ns = owner["metadata"]["namespace"]
        self._clear_previous_attempt(ns, dry_run.context.experiment_id)
        self.upload_code(dry_run.context)
        try:
            created = self.api.create(ns, owner)
        except KubeError as exc:
            raise BackendUnavailable(f"creating ConfigMap {owner['metadata']['name']} failed: {exc}") from exc
        uid = created["metadata"]["uid"]
        try:
            for obj in rest:
                obj["metadata"]["ownerReferences"] = [owner_reference(owner["metadata"]["name"], uid)]
                self.api.create(ns, obj)
        except KubeError as exc:
            self.api.delete(ns, "ConfigMap", owner["metadata"]["name"])  # nothing half-created stays
            raise BackendUnavailable(
                f"creating {obj['kind']} {obj['metadata']['name']} failed: {exc}"
            ) from exc
        return f"{ns}/{dry_run.context.experiment_id}"

    def _clear_previous_attempt(self, ns: str, exp: str, timeout: float = 120.0) -> None:
        """A restart reuses the names: delete what the last attempt left and wait until it is gone."""
        if self.api.get(ns, "ConfigMap", prefix(exp)) is None and not self.api.list_pods(
            ns, selector(labels(exp))
        ):
            return
        self.api.delete(ns, "ConfigMap", prefix(exp))
        deadline = time.monotonic() + timeout
        while self.api.list_pods(ns, selector(labels(exp))) or self.api.get(ns, "ConfigMap", prefix(exp)):
            if time.monotonic() > deadline:
                raise BackendUnavailable(f"the previous attempt's pods of {exp} are still being deleted")
            time.sleep(0.5)

    @staticmethod
    def _split(handle: str) -> tuple[str, str]:
        ns, sep, exp = handle.partition("/")
        if not sep or not exp:
            raise NotFound(f"{handle!r} is not a Kubernetes handle (<namespace>/<experiment id>)")
        return ns, exp

    def _expected(self, ns: str, exp: str) -> list[str] | None:
        owner = self.api.get(ns, "ConfigMap", prefix(exp))
        if owner is None:
            return None
        plan = json.loads((owner.get("data") or {}).get("plan.json") or "{}")
        return [r["name"] for r in plan.get("replicas", [])]

    def describe(self, handle: str) -> JobStatus | None:
        ns, exp = self._split(handle)
        expected = self._expected(ns, exp)
        pods = {
            p["metadata"]["labels"].get(LABEL_REPLICA): p
            for p in self.api.list_pods(ns, selector(labels(exp)))
        }
        if expected is None:
            if not pods:
                return None
            expected = sorted(n for n in pods if n)
        return job_status([pod_status(name, pods.get(name)) for name in expected])

    def stop_replicas(self, handle: str, reason: str) -> None:
        """Stop every pod still pending or running; they end Failed/DeadlineExceeded, logs kept."""
        ns, exp = self._split(handle)
        for pod in self.api.list_pods(ns, selector(labels(exp))):
            if (pod.get("status") or {}).get("phase") in ("Pending", "Running", None):
                patch = {
                    "metadata": {"annotations": {STOP_ANNOTATION: reason}},
                    "spec": {"activeDeadlineSeconds": 1},
                }
                try:
                    self.api.patch_pod(ns, pod["metadata"]["name"], patch)
                except KubeError as exc:
                    if exc.status != 404:
                        raise

    def watch(self, handle: str, timeout: float = 3600.0) -> Iterator[JobStatus]:
        """Each change of the experiment's state, from pod events, until it is done or ``timeout``.
        Enforces the gang rule: the first failed replica stops the others."""
        ns, exp = self._split(handle)
        last: JobStatus | None = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _event, _pod in self.api.watch_pods(ns, selector(labels(exp)), deadline - time.monotonic()):
                status = self.describe(handle)
                if status is None:
                    return
                if status.status is ExperimentStatus.FAILED and any(
                    not r.state.done for r in status.replicas
                ):
                    self.stop_replicas(handle, f"stopped after {status.reason}")
                if status != last:
                    last = status
                    yield status
                if status.status.done and all(r.state.done for r in status.replicas):
                    return

    def logs(self, handle: str, replica: str, follow: bool = False) -> Iterator[str]:
        """The replica's console; with follow, waits for its container to start and reads to its end."""
        ns, exp = self._split(handle)
        name = f"{prefix(exp)}-{replica}"
        yield from self.pod_lines(handle, ns, name, follow, gone=lambda exc: exc.status == 404)

    def discard_logs(self, handle: str) -> None:
        """Nothing to remove: the pods' logs are the kubelet's, and go with the pods."""

    def cancel(self, handle: str) -> None:
        """Stop what still runs, let this engine's log readers take the last lines, then delete the
        owner: Kubernetes garbage-collects the pods and services. Idempotent."""
        ns, exp = self._split(handle)
        if self.api.get(ns, "ConfigMap", prefix(exp)) is None:
            return
        self.stop_replicas(handle, "stopped by phalanx")
        self._readers.wait_closed(handle)
        self.api.delete(ns, "ConfigMap", prefix(exp))
