"""`python -m phalanx.runner RUN_DIR`: a detached experiment's supervisor.

It supervises the launch the Runner wrote into RUN_DIR (the validated spec and its typed options),
its output going to the log the Runner opened for it. Exit status as for `phalanx run`: 0
succeeded, 1 failed, 130 stopped, 2 a request that cannot run (its message starts `error: `).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from phalanx.config import Settings
from phalanx.runner.detached import supervise_launch
from phalanx.runner.running import Runner

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


def main(argv: list[str], store: LocalStore | None = None) -> int:
    """``store``: an open store to use, else the settings' store is opened once the replicas are
    starting (phalanx.runner.detached.supervise_launch)."""
    return supervise_launch(argv, _runner, store)


def _runner() -> Runner:
    return Runner(Settings())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
