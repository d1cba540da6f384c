"""A running service as the server's services keep it (phalanx.server.services): its kind, project,
target, processes, who started it, what it holds of the machine; and the kinds there are."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.server.service_spawn import Instance
from phalanx.services.targets import Target
from phalanx.store.accounts import Role

if TYPE_CHECKING:
    from phalanx.services.boards import Board
    from phalanx.services.seats import Seat

TENSORBOARD = "tensorboard"
NOTEBOOK = "notebook"
MODEL = "model"  # a registered model served (phalanx.serving.folder)
SERVED = "served.json"  # in a served model's folder: what it serves, for the next server
MAX_REPLICAS = 16  # a served model's processes behind its one address


@dataclass
class Service:
    """One running service. ``role``: the least role in ``project`` that reaches it."""

    id: str
    kind: str
    project: str
    target: Target
    folder: Path
    instances: list[Instance]  # its processes: one, or a served model's replicas
    board: Board | None  # a TensorBoard's; a notebook has none
    started_by: str
    role: Role = Role.viewer
    started_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    # a served model's: its instance N again (a new process, same service) when that one dies, and
    # what hands a moved alias's version over to them; how often one was started again
    respawn: Callable[[int], Instance] | None = None
    follow: Callable[[], None] | None = None
    restarts: int = 0
    environment: str | None = None  # a notebook's kernels' build environment (None: Phalanx's)
    seat: Seat | None = None  # what it holds of the machine's ledger (a notebook's resources)
    _turns: Iterator[int] = field(default_factory=itertools.count, repr=False)

    def alive(self) -> bool:
        """Whether any of its processes runs."""
        return any(i.process.alive() for i in self.instances)

    def in_turn(self) -> list[Path]:
        """The sockets a request may go to, the first first: its running instances, each first in
        turn; those whose process ended (until it is started again) only when none runs."""
        running = [i.socket for i in self.instances if i.process.alive()]
        if not running:
            return [i.socket for i in self.instances]
        turn = next(self._turns) % len(running)
        return running[turn:] + running[:turn]

    @property
    def manage_role(self) -> Role:
        """The least role that starts or stops it: a board's viewers; a notebook's or a served
        model's editors (code runs in one, the other holds the project's resources)."""
        return Role.viewer if self.kind == TENSORBOARD else Role.editor

    @property
    def path(self) -> str:
        return f"/services/{self.id}/"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": self.kind,
            "project": self.project,
            "target": {"kind": self.target.kind, "id": self.target.id},
            "path": self.path,
            "started_by": self.started_by,
            "started_at": self.started_at,
            "idle_seconds": round(time.monotonic() - self.last_used, 1),
            "restarts": self.restarts,
            "replicas": len(self.instances),
            "environment": self.environment,
            "holds": self.seat.describe() if self.seat is not None else None,
        }
