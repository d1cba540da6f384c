from __future__ import annotations

from phalanx.domain import Framework
from phalanx.frameworks import Endpoints
from phalanx.plan import Plan, build_plan
from phalanx.spec.model import ExperimentSpec, Topology


def make_plan(
    framework: Framework | None, workers: int = 1, ps: int = 0, processes: int = 1, **kw: object
) -> Plan:
    spec = ExperimentSpec(
        version=1,
        kind="experiment",
        command=("python train.py",),
        framework=framework,
        topology=Topology(n_workers=workers, n_ps=ps, processes_per_replica=processes),
        **kw,  # type: ignore[arg-type]
    )
    return build_plan(spec)


def endpoints(plan: Plan) -> Endpoints:
    return Endpoints.on_host(
        plan, "127.0.0.1", {r.name: 20000 + i for i, r in enumerate(plan.replicas)}, "lo"
    )
