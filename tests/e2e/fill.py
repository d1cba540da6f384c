"""Filling the browser tests' store (session-wide)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Filled:
    home: Path
    first: str
    second: str
    topology_text: str
    replicas: list[str]
    loss_series: list[str]
    artifacts: list[str]
    general_params: dict[str, str]  # key -> replica that connected it
    console_replicas: list[str]
    console_needle: str
    differing_param: str
    extra: dict[str, str] = field(default_factory=dict)


def fill_with_runs(home: Path) -> Filled:
    from tests.e2e.demo_store import fill

    ids = fill(home)
    return Filled(
        home=home,
        first=ids["a"],
        second=ids["b"],
        topology_text="1 master · 3 workers · 1 ps",
        replicas=["master", "worker-0", "worker-1", "worker-2", "ps-0"],
        loss_series=["worker 00", "worker 01", "worker 02", "worker 03"],
        artifacts=["temp 00", "temp 01", "temp 02", "temp 03"],
        general_params={"worker_0_stuff": "master", "worker_3_stuff": "worker-2"},
        console_replicas=["master", "worker-0", "worker-1", "worker-2"],
        console_needle="epoch 7",
        differing_param="lr",
    )
