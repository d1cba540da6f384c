"""Plans and contexts the engine tests share (built in Python: no file, no loader needed)."""

from __future__ import annotations

from phalanx.backends.base import LaunchContext
from phalanx.domain import Framework, Range, Resources
from phalanx.plan import Plan, build_plan
from phalanx.spec.model import ExperimentSpec, ReplicaTemplate, Topology

EXPERIMENT_ID = "0123456789ab"
SERVER = "http://phalanx.ml.svc:8000"  # the Phalanx server a test cluster's pods fetch code from


class CodeShelf:
    """Stands in for the server's file store in tests that drive a fake cluster: records each code
    bundle a Kubernetes engine would PUT (url -> bytes), so a test can open what the pods would fetch."""

    def __init__(self) -> None:
        self.bundles: dict[str, bytes] = {}

    def __call__(self, url: str, data: bytes) -> None:
        self.bundles[url] = data


def context(**tracking: str) -> LaunchContext:
    return LaunchContext(EXPERIMENT_ID, "/work/exp", "/opt/venv/bin/python", dict(tracking))


def plan(
    framework: Framework | None = Framework.PYTORCH,
    workers: int = 1,
    ps: int = 0,
    worker: dict[int, ReplicaTemplate] | None = None,
    default_worker: ReplicaTemplate | None = None,
    master: ReplicaTemplate | None = None,
    command: str = "python -u train.py",
    **spec: object,
) -> Plan:
    return build_plan(
        ExperimentSpec(
            version=1,
            kind="experiment",
            command=(command,),
            framework=framework,
            master=master or ReplicaTemplate(),
            topology=Topology(n_workers=workers, n_ps=ps, worker=worker or {}, default_worker=default_worker),
            **spec,  # type: ignore[arg-type]
        )
    )


def resources(cpu: float | None = None, memory: float | None = None, gpu: float | None = None) -> Resources:
    return Resources(cpu=Range(cpu, cpu), memory=Range(memory, memory), gpu=Range(gpu, gpu))
