"""FakeKubernetesAPI: an in-process, stateful stand-in for the Kubernetes API server.

It is a fake because no API server can run on the machines Phalanx is built and tested on (no
kube-apiserver, kind, k3s or kwok is obtainable there). It implements the ``KubeAPI`` protocol the
Kubernetes and Kubeflow engines use, with the behaviour they rely on: objects get a uid and a
resourceVersion; creating an existing name is 409; core objects are validated with
kubernetes-validate (strict) as the API server would; deleting an object garbage-collects its
dependents (ownerReferences, transitively); pods have phases, container states and logs; a pod
whose activeDeadlineSeconds is lowered fails with DeadlineExceeded (as the kubelet does); watches
stream ADDED/MODIFIED/DELETED events. The test plays the kubelet and the operators: ``start``,
``finish``, ``log``, ``set_condition``.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from phalanx.backends.kube_api import KubeError

Key = tuple[str, str, str]  # (kind, namespace, name)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _matches(labels: Mapping[str, str], label_selector: str) -> bool:
    for term in filter(None, label_selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKubernetesAPI:
    """See the module docstring. Thread-safe: the controller may watch while a test plays the kubelet."""

    def __init__(self, validate: bool = True) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.logs: dict[Key, list[str]] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []  # pod events, for watches
        self.validate = validate
        self.calls: list[str] = []  # "create Pod ns/name", for assertions on order
        self._version = 0
        self._cond = threading.Condition()

    # -- helpers ------------------------------------------------------------------------------
    def _bump(self, obj: dict[str, Any]) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)

    def _event(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        if kind == "Pod":
            self.events.append((type_, copy.deepcopy(obj)))
        self._cond.notify_all()

    def names(self, kind: str, namespace: str = "default") -> list[str]:
        with self._cond:
            return sorted(n for k, ns, n in self.objects if k == kind and ns == namespace)

    # -- KubeAPI ------------------------------------------------------------------------------
    def create(self, namespace: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(dict(obj))
        kind, name = body["kind"], body["metadata"]["name"]
        if self.validate and body.get("apiVersion") == "v1":
            import kubernetes_validate

            try:
                kubernetes_validate.validate(body, "1.37.0", strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise KubeError(422, f"{kind} {name} is invalid: {exc.message}") from exc
        with self._cond:
            key = (kind, namespace, name)
            if key in self.objects:
                raise KubeError(409, f'{kind.lower()}s "{name}" already exists')
            for ref in body["metadata"].get("ownerReferences") or []:
                if not ref.get("uid"):
                    raise KubeError(422, "ownerReferences[].uid: Required value")
            meta = body["metadata"]
            meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now())
            if kind == "Pod":
                body["status"] = {"phase": "Pending"}
                self.logs[key] = []
            self._bump(body)
            self.objects[key] = body
            self.calls.append(f"create {kind} {namespace}/{name}")
            self._event(kind, "ADDED", body)
            return copy.deepcopy(body)

    def get(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        with self._cond:
            obj = self.objects.get((kind, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def delete(self, namespace: str, kind: str, name: str) -> bool:
        with self._cond:
            obj = self.objects.pop((kind, namespace, name), None)
            if obj is None:
                return False
            self.calls.append(f"delete {kind} {namespace}/{name}")
            self._event(kind, "DELETED", obj)
            self._collect(obj["metadata"]["uid"])
            return True

    def _collect(self, uid: str) -> None:
        """Garbage collection: delete every object owned by ``uid``, then their dependents."""
        for key, obj in list(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs) and key in self.objects:
                del self.objects[key]
                self._event(key[0], "DELETED", obj)
                self._collect(obj["metadata"]["uid"])

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        with self._cond:
            return [
                copy.deepcopy(o)
                for (k, ns, _), o in sorted(self.objects.items())
                if k == "Pod"
                and ns == namespace
                and _matches(o["metadata"].get("labels") or {}, label_selector)
            ]

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        with self._cond:
            pod = self.objects.get(("Pod", namespace, name))
            if pod is None:
                raise KubeError(404, f'pods "{name}" not found')
            annotations = (patch.get("metadata") or {}).get("annotations")
            if annotations:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
            deadline = (patch.get("spec") or {}).get("activeDeadlineSeconds")
            if deadline is not None:
                pod["spec"]["activeDeadlineSeconds"] = deadline
                if pod["status"]["phase"] in ("Pending", "Running"):
                    # the kubelet kills a pod past its deadline: Failed / DeadlineExceeded
                    self._terminate(pod, 137, "DeadlineExceeded", pod_reason="DeadlineExceeded")
            self._bump(pod)
            self._event("Pod", "MODIFIED", pod)
            return copy.deepcopy(pod)

    def watch_pods(
        self, namespace: str, label_selector: str, timeout_seconds: float
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        deadline = time.monotonic() + timeout_seconds
        with self._cond:
            seen = len(self.events)
            current = self.list_pods(namespace, label_selector)
        for pod in current:
            yield "ADDED", pod
        while True:
            with self._cond:
                while len(self.events) == seen:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._cond.wait(min(left, 0.5))
                batch = self.events[seen:]
                seen = len(self.events)
            for type_, pod in batch:
                if pod["metadata"]["namespace"] == namespace and _matches(
                    pod["metadata"].get("labels") or {}, label_selector
                ):
                    yield type_, copy.deepcopy(pod)

    def pod_log(self, namespace: str, name: str, follow: bool) -> Iterator[str]:
        key = ("Pod", namespace, name)
        with self._cond:
            pod = self.objects.get(key)
            if pod is None:
                raise KubeError(404, f'pods "{name}" not found')
            if pod["status"]["phase"] == "Pending":
                raise KubeError(400, f'container "replica" in pod "{name}" is waiting to start')
        pos = 0
        while True:
            with self._cond:
                lines = list(self.logs.get(key, []))
                pod = self.objects.get(key)
                ended = pod is None or pod["status"]["phase"] not in ("Pending", "Running")
                if follow and pos == len(lines) and not ended:
                    self._cond.wait(0.5)
                    continue
            yield from lines[pos:]
            pos = len(lines)
            if not follow or ended:
                return

    # -- the kubelet and the operators, played by the test ------------------------------------
    @staticmethod
    def _container_status(
        pod: dict[str, Any], state: dict[str, Any], ready: bool = False
    ) -> list[dict[str, Any]]:
        """What a kubelet reports for the pod's first container (every field the API guarantees)."""
        c = pod["spec"]["containers"][0]
        return [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": f"docker.io/library/{c.get('image', '')}@sha256:{'0' * 64}",
                "ready": ready,
                "restartCount": 0,
                "started": "running" in state,
                "state": state,
            }
        ]

    def start(self, name: str, namespace: str = "default", node: str = "node-1") -> None:
        """The pod is scheduled and its container runs."""
        with self._cond:
            pod = self.objects[("Pod", namespace, name)]
            pod["spec"]["nodeName"] = node
            pod["status"] = {
                "phase": "Running",
                "startTime": _now(),
                "containerStatuses": self._container_status(pod, {"running": {"startedAt": _now()}}, True),
            }
            self._bump(pod)
            self._event("Pod", "MODIFIED", pod)

    def log(self, name: str, *lines: str, namespace: str = "default") -> None:
        with self._cond:
            self.logs.setdefault(("Pod", namespace, name), []).extend(lines)
            self._cond.notify_all()

    def finish(
        self, name: str, exit_code: int = 0, namespace: str = "default", reason: str | None = None
    ) -> None:
        """The container exits with ``exit_code`` (reason e.g. "OOMKilled")."""
        with self._cond:
            pod = self.objects[("Pod", namespace, name)]
            self._terminate(pod, exit_code, reason or ("Completed" if exit_code == 0 else "Error"))
            self._bump(pod)
            self._event("Pod", "MODIFIED", pod)

    def wait_pending(self, name: str, reason: str, namespace: str = "default") -> None:
        """The container cannot start (ErrImagePull, ...)."""
        with self._cond:
            pod = self.objects[("Pod", namespace, name)]
            pod["status"]["containerStatuses"] = [
                {"name": "replica", "state": {"waiting": {"reason": reason}}}
            ]
            self._bump(pod)
            self._event("Pod", "MODIFIED", pod)

    @classmethod
    def _terminate(cls, pod: dict[str, Any], code: int, reason: str, pod_reason: str | None = None) -> None:
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        if pod_reason:
            pod["status"]["reason"] = pod_reason
        terminated = {"exitCode": code, "reason": reason, "startedAt": _now(), "finishedAt": _now()}
        pod["status"]["containerStatuses"] = cls._container_status(pod, {"terminated": terminated})

    def set_condition(
        self, kind: str, name: str, type_: str, namespace: str = "default", message: str = ""
    ) -> None:
        """The training operator records a job condition (Created, Running, Succeeded, Failed...)."""
        with self._cond:
            job = self.objects[(kind, namespace, name)]
            conditions = job.setdefault("status", {}).setdefault("conditions", [])
            for c in conditions:
                c["status"] = "False" if c["type"] in ("Running", "Restarting") else c["status"]
            conditions.append(
                {"type": type_, "status": "True", "message": message, "lastTransitionTime": _now()}
            )
            self._bump(job)
            self._cond.notify_all()

    def run_operator(self, kind: str, name: str, namespace: str = "default") -> list[str]:
        """The training operator creates the job's pods (<job>-<type>-<index>, owned by the job)."""
        with self._cond:
            job = copy.deepcopy(self.objects[(kind, namespace, name)])
        field = next(k for k in job["spec"] if k.endswith("ReplicaSpecs"))
        created = []
        for rtype, rs in job["spec"][field].items():
            for i in range(int(rs.get("replicas", 1))):
                template = copy.deepcopy(rs["template"])
                meta = template.get("metadata") or {}
                pod_labels = {
                    **(meta.get("labels") or {}),
                    "training.kubeflow.org/job-name": name,
                    "training.kubeflow.org/replica-type": rtype.lower(),
                    "training.kubeflow.org/replica-index": str(i),
                }
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-{rtype.lower()}-{i}",
                        "labels": pod_labels,
                        "ownerReferences": [
                            {
                                "apiVersion": job["apiVersion"],
                                "kind": kind,
                                "name": name,
                                "uid": job["metadata"]["uid"],
                                "controller": True,
                            }
                        ],
                    },
                    "spec": {**template["spec"], "restartPolicy": rs.get("restartPolicy", "Never")},
                }
                created.append(self.create(namespace, pod)["metadata"]["name"])
        return created
