"""How `make test` shares the suite between pytest-xdist workers (docs/testing.md, "Parallel runs").

A work unit is a test module, so a module's shared set-up (a filled store and its server, a built
venv, a run several tests read) runs once, on one worker. The tests of the local Slurm cluster are
one unit: one cluster serves them all, as in a serial run. Units are handed out heaviest first (the
folders whose modules start clusters, servers, browsers and experiments), so the many short unit
modules fill the workers' last minutes instead of one long module running alone at the end.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

SLURM = "tests/integration/slurm/"

# Heaviest first: each unit's place is the first prefix its module path starts with (the rest last).
ORDER = (
    SLURM,
    "tests/integration/",
    "tests/e2e/",
    "tests/",
)


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its module, or the Slurm cluster's one unit."""
    return SLURM if nodeid.startswith(SLURM) else nodeid.split("::", 1)[0]


def rank(unit: str) -> int:
    return next((i for i, prefix in enumerate(ORDER) if unit.startswith(prefix)), len(ORDER))


class ModuleScheduling(LoadScopeScheduling):
    """LoadScopeScheduling with a module (or the Slurm cluster) as the scope, heaviest first."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        if not self._ordered:  # the first assignment: the queue holds every unit (most tests first)
            self._ordered = True
            units = sorted(self.workqueue.items(), key=lambda item: rank(item[0]))
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)
