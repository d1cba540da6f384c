"""What the Kubernetes and Kubeflow engines share: names, labels, containers, quantities, validation.

Pure functions of the Plan: the objects they build are exactly what the controllers send, so the
dry run (YAML) and the golden tests show the real thing. Every Pod/Service/ConfigMap is checked with
``kubernetes-validate`` in strict mode against the schemas of ``KUBERNETES_VERSION`` (they ship with
the package, offline), the way the API server would reject an unknown or mistyped field.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml

from phalanx.backends.base import DryRun
from phalanx.errors import Problem, SpecError
from phalanx.extras import require
from phalanx.plan import Plan, ReplicaPlan
from phalanx.tokens import experiment_token

KUBERNETES_VERSION = "1.37.0"  # the newest schema set kubernetes-validate 1.37.0 ships offline
DEFAULT_IMAGE = "python:3.11-slim"  # when the file names no build.image
GPU_RESOURCE = "nvidia.com/gpu"
PORT = 2222  # every replica listens here; each Pod has its own address, so one port fits all
TOKEN_SECRET = "phalanx-token"  # rendered; replaced by a per-experiment Secret when Phalanx has the token
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"  # replaced by the owner's uid at submit

LABEL_EXPERIMENT = "phalanx.dev/experiment"
LABEL_REPLICA = "phalanx.dev/replica"
LABEL_ROLE = "phalanx.dev/role"


def prefix(experiment_id: str) -> str:
    """Object names start with a letter (DNS-1035) and say who made them."""
    return f"phx-{experiment_id}"


def token_secret_name(experiment_id: str) -> str:
    return f"{prefix(experiment_id)}-token"


def with_experiment_token(
    objects: Sequence[Mapping[str, Any]], experiment_id: str, namespace: str, token: str
) -> list[Mapping[str, Any]]:
    """The objects with a Secret holding a token that writes this experiment only (phalanx.tokens),
    placed right after the owner, and every reference to the user's `phalanx-token` Secret pointed
    at it (required, so a pod without it waits visibly instead of reporting unauthenticated).

    Why: a pod runs the user's code on a shared cluster; the server's token in it would let that
    code, or anyone who can read the namespace's Secrets, read, stop and delete every experiment.
    """
    name = token_secret_name(experiment_id)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(experiment_id)},
        "type": "Opaque",
        "stringData": {"token": experiment_token(token, experiment_id)},
    }

    def point(value: Any) -> Any:
        if isinstance(value, Mapping):
            ref = value.get("secretKeyRef")
            if isinstance(ref, Mapping) and ref.get("name") == TOKEN_SECRET:
                return {**value, "secretKeyRef": {"name": name, "key": "token"}}
            return {k: point(v) for k, v in value.items()}
        if isinstance(value, list):
            return [point(v) for v in value]
        return value

    pointed = [point(o) for o in objects]
    return [pointed[0], secret, *pointed[1:]]


def labels(experiment_id: str, replica: ReplicaPlan | None = None) -> dict[str, str]:
    out = {"app.kubernetes.io/managed-by": "phalanx", LABEL_EXPERIMENT: experiment_id}
    if replica is not None:
        out[LABEL_REPLICA] = replica.name
        out[LABEL_ROLE] = str(replica.role)
    return out


def cpu_quantity(cores: float) -> str:
    return str(int(cores)) if float(cores).is_integer() else f"{math.ceil(cores * 1000)}m"


def resources(replica: ReplicaPlan) -> dict[str, dict[str, str]]:
    """requests/limits in Kubernetes quantities; GPUs only as limits (an extended resource's request
    defaults to its limit and may not differ from it)."""
    r = replica.resources
    req: dict[str, str] = {}
    lim: dict[str, str] = {}
    if r.cpu.requests is not None:
        req["cpu"] = cpu_quantity(r.cpu.requests)
    if r.cpu.limits is not None:
        lim["cpu"] = cpu_quantity(r.cpu.limits)
    if r.memory.requests is not None:
        req["memory"] = f"{math.ceil(r.memory.requests)}Mi"
    if r.memory.limits is not None:
        lim["memory"] = f"{math.ceil(r.memory.limits)}Mi"
    gpus = [v for v in (r.gpu.requests, r.gpu.limits) if v is not None]
    if gpus:
        lim[GPU_RESOURCE] = str(math.ceil(max(gpus)))
    out = {}
    if req:
        out["requests"] = req
    if lim:
        out["limits"] = lim
    return out


def _label_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def placement(replica: ReplicaPlan) -> dict[str, Any]:
    """nodeSelector, affinity and tolerations as the file gave them (Kubernetes' own keys)."""
    out: dict[str, Any] = {}
    if replica.node_selector:
        out["nodeSelector"] = {str(k): _label_value(v) for k, v in replica.node_selector.items()}
    if replica.affinity:
        out["affinity"] = _plain(replica.affinity)
    if replica.tolerations:
        out["tolerations"] = [_plain(t) for t in replica.tolerations]
    return out


def _plain(value: Any) -> Any:
    """Mappings and tuples from the frozen spec as JSON-able dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def env_list(env: Mapping[str, str], token: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    if token:
        out.append(
            {
                "name": "PHALANX_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": TOKEN_SECRET, "key": "token", "optional": True}},
            }
        )
    return out


def image(plan: Plan) -> str:
    return plan.build.image or DEFAULT_IMAGE


def owner_reference(name: str, uid: str = PLACEHOLDER_UID) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid, "blockOwnerDeletion": True}


def validate_core(objects: Sequence[Mapping[str, Any]]) -> None:
    """Check core objects against Kubernetes' schemas (strict: unknown fields are errors).

    A failure is a bug in the render or a value the user gave that Kubernetes refuses (a bad
    toleration, say), so it is a SpecError naming the object and the field.
    """
    kubernetes_validate = _kubernetes_validate()
    problems = []
    for obj in objects:
        try:
            kubernetes_validate.validate(dict(obj), KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {where}: {exc.message}")
    if problems:
        raise SpecError([Problem(f"Kubernetes would refuse it: {p}") for p in problems])


@functools.cache
def _kubernetes_validate() -> Any:
    """kubernetes_validate, with its schema files parsed once per process. Its ``validate`` lists
    the versions it ships and reads and parses the version's 4 MB ``_definitions.json`` again for
    every object (15 ms an object; a dry run checks one per replica and more). Those files are the
    package's own and never change, and neither the library nor jsonschema alters a parsed schema,
    so the cache answers exactly what a new read would."""
    kubernetes_validate = require("kubernetes_validate", "kubernetes", "checking Kubernetes objects")
    utils = kubernetes_validate.utils  # validate() finds both functions through this module's globals
    utils.schema_contents = functools.lru_cache(maxsize=64)(utils.schema_contents)
    utils.all_versions = functools.lru_cache(maxsize=1)(utils.all_versions)
    return kubernetes_validate


def to_yaml(objects: Sequence[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all([dict(o) for o in objects], sort_keys=False, default_flow_style=False)


@dataclass(frozen=True)
class KubeDryRun(DryRun):
    """The Kubernetes engines' request: the objects to create, owner first (a ConfigMap, a Kubeflow
    job, a TrainJob); ``native`` is them as a list, rendered as `kubectl apply -f` YAML."""

    objects: tuple[Mapping[str, Any], ...]
    format: ClassVar[str] = "yaml"

    @property
    def native(self) -> list[Mapping[str, Any]]:
        return list(self.objects)

    def render(self) -> str:
        return to_yaml(self.objects)


class LogReaders:
    """Counts this engine's open log followers per handle, so ``cancel`` can let them read a pod's
    last lines before deleting it (a deleted pod's log is gone for good)."""

    GRACE_SECONDS = 10.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    def enter(self, handle: str) -> None:
        with self._lock:
            self._open[handle] = self._open.get(handle, 0) + 1

    def leave(self, handle: str) -> None:
        with self._lock:
            self._open[handle] = self._open.get(handle, 1) - 1

    def wait_closed(self, handle: str, timeout: float | None = None) -> bool:
        deadline = time.monotonic() + (self.GRACE_SECONDS if timeout is None else timeout)
        while time.monotonic() < deadline:
            with self._lock:
                if self._open.get(handle, 0) <= 0:
                    return True
            time.sleep(0.05)
        return False
