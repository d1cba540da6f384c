"""The few Kubernetes API calls the Kubernetes and Kubeflow engines make, behind one small protocol.

``ClientAPI`` implements it with the official ``kubernetes`` client (imported here, on first use,
never at module import), turning its generated models into plain dicts at the boundary so no
generated model leaks out. ``tests.support.fake_kube.FakeKubernetesAPI`` implements the same
protocol in process for the tests, because no API server can run on the machines we build on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from phalanx.backends.logfiles import Lines
from phalanx.errors import BackendUnavailable
from phalanx.extras import require

# Where each kind we create lives in the API: kind -> (group, version, plural). "" group = core.
KINDS: dict[str, tuple[str, str, str]] = {
    "ConfigMap": ("", "v1", "configmaps"),
    "Service": ("", "v1", "services"),
    "Pod": ("", "v1", "pods"),
    "Secret": ("", "v1", "secrets"),  # the per-experiment replica token
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "TFJob": ("kubeflow.org", "v1", "tfjobs"),
    "MXJob": ("kubeflow.org", "v1", "mxjobs"),
    "MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"),  # the MPI operator's API (v0.8)
    "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),  # Kubeflow Trainer v2
}


class KubeError(Exception):
    """An API call failed; ``status`` is the HTTP status (404 absent, 409 exists, 422 invalid)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def selector(labels: Mapping[str, str]) -> str:
    """An equality label selector, as `kubectl get -l` takes it."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class KubeAPI(Protocol):
    """Objects are plain dicts (what `kubectl get -o json` shows)."""

    def create(self, namespace: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create; returns the stored object (with metadata.uid). KubeError 409 if it exists."""
        ...

    def get(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None: ...

    def delete(self, namespace: str, kind: str, name: str) -> bool:
        """Delete with background propagation (dependents are garbage-collected); False if absent."""
        ...

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]: ...

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]: ...

    def watch_pods(
        self, namespace: str, label_selector: str, timeout_seconds: float
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(ADDED|MODIFIED|DELETED, pod) events, current pods first, until the timeout."""
        ...

    def pod_log(self, namespace: str, name: str, follow: bool) -> Iterator[str]:
        """The pod's console lines; with follow, until its container ends. KubeError 400 while it
        has not started (as the API server answers)."""
        ...


class ClientAPI:
    """KubeAPI over the official client; ``context`` picks a kubeconfig context (None: current)."""

    def __init__(self, context: str | None = None, kubeconfig: str | None = None) -> None:
        require("kubernetes", "kubernetes", "a Kubernetes cluster")
        from kubernetes import client, config  # why: kubernetes is optional (the `kubernetes` extra)

        try:
            # a client of its own (not the module-wide default), so two clusters can coexist
            api = config.new_client_from_config(config_file=kubeconfig, context=context)
        except Exception as kube_error:
            try:
                config.load_incluster_config()
            except Exception:
                raise BackendUnavailable(
                    f"no Kubernetes configuration for context {context or '(current)'}: {kube_error}"
                ) from kube_error
            api = client.ApiClient()
        self._client = client
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def _plain(self, obj: Any) -> dict[str, Any]:
        out: dict[str, Any] = self.api.sanitize_for_serialization(obj)
        return out

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self._client.ApiException as exc:
            raise KubeError(int(exc.status or 0), str(exc.reason or exc.body)) from exc

    def create(self, namespace: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        group, version, plural = KINDS[obj["kind"]]
        if group:
            out: dict[str, Any] = self._call(
                self.custom.create_namespaced_custom_object, group, version, namespace, plural, dict(obj)
            )
            return out
        create = getattr(self.core, f"create_namespaced_{_snake(obj['kind'])}")
        return self._plain(self._call(create, namespace, dict(obj)))

    def get(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        group, version, plural = KINDS[kind]
        try:
            if group:
                out: dict[str, Any] = self._call(
                    self.custom.get_namespaced_custom_object, group, version, namespace, plural, name
                )
                return out
            return self._plain(
                self._call(getattr(self.core, f"read_namespaced_{_snake(kind)}"), name, namespace)
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, namespace: str, kind: str, name: str) -> bool:
        group, version, plural = KINDS[kind]
        body = {"propagationPolicy": "Background"}
        try:
            if group:
                self._call(
                    self.custom.delete_namespaced_custom_object,
                    group,
                    version,
                    namespace,
                    plural,
                    name,
                    body=body,
                )
            else:
                self._call(
                    getattr(self.core, f"delete_namespaced_{_snake(kind)}"), name, namespace, body=body
                )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        pods = self._call(self.core.list_namespaced_pod, namespace, label_selector=label_selector)
        return [self._plain(p) for p in pods.items]

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return self._plain(self._call(self.core.patch_namespaced_pod, name, namespace, dict(patch)))

    def watch_pods(
        self, namespace: str, label_selector: str, timeout_seconds: float
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        from kubernetes import watch  # why: kubernetes is optional (the `kubernetes` extra)

        stream = watch.Watch().stream(
            self.core.list_namespaced_pod,
            namespace,
            label_selector=label_selector,
            timeout_seconds=int(timeout_seconds),
        )
        for event in stream:
            yield str(event["type"]), self._plain(event["object"])

    def pod_log(self, namespace: str, name: str, follow: bool) -> Iterator[str]:
        resp = self._call(
            self.core.read_namespaced_pod_log, name, namespace, follow=follow, _preload_content=False
        )
        lines = Lines()  # a pod's line without end comes in pieces, as a local replica's
        for chunk in resp.stream(4096):
            for line in lines.feed(chunk):
                yield line.decode("utf-8", "replace")
        for line in lines.end():
            yield line.decode("utf-8", "replace")


def _snake(kind: str) -> str:
    return {"ConfigMap": "config_map", "Service": "service", "Pod": "pod", "Secret": "secret"}[kind]
