"""`python -m phalanx.groups GROUP_ID`: run (or resume) one group's controller to its end, in this
process (``GroupLauncher.start`` starts it in its own session). Exit status as `phalanx group
run`: 0 finished, 1 every trial failed, 130 stopped, 2 another controller holds the group."""

from __future__ import annotations

import sys

from phalanx.config import Settings
from phalanx.errors import PhalanxError, exit_status
from phalanx.groups.controller import Controller
from phalanx.store import open_store


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m phalanx.groups GROUP_ID\n")
        return 2

    def say(text: str) -> None:
        sys.stderr.write(f"phalanx: {text}\n")
        sys.stderr.flush()

    settings = Settings()
    try:
        store = open_store(settings)
        done = Controller(store, settings, argv[0], say=say).run()
    except PhalanxError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return exit_status(exc)
    return {"succeeded": 0, "stopped": 130}.get(str(done.status), 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
