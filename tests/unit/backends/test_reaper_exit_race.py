"""A replica that exits non-zero just as the reaper looks is recorded as failed with its code. The
reaper once asked each process twice per round (did one fail? have all ended?): a process that
ended between the two looks made the unit end as if all had succeeded, its code never read, and
its siblings ran on (seen as `phalanx run` hanging on a sibling's `sleep 600`, status exit 0 with
returncodes [3])."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from phalanx.backends.local.reaper import Reaper


class ExitsBetweenLooks:
    """A process that is still running at the first look of a round and has exited with ``code``
    at every look after it."""

    pid = 424242

    def __init__(self, code: int) -> None:
        self.code = code
        self.looks = 0
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.looks += 1
        if self.looks > 1:
            self.returncode = self.code
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.code


def test_a_process_that_exits_between_two_looks_is_a_failure_with_its_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status = tmp_path / "worker-0.status.json"
    reaper = Reaper({"processes": [], "log": str(tmp_path / "worker-0.log"), "status": str(status)})
    proc = ExitsBetweenLooks(3)

    def start(log: Any, sel: Any) -> None:
        reaper.procs.append(proc)  # type: ignore[arg-type]

    monkeypatch.setattr(reaper, "start", start)
    # this test's process is not a replica's reaper: nothing here may signal or reap its children
    monkeypatch.setattr(reaper, "reap_orphans", lambda: None)
    monkeypatch.setattr(reaper, "terminate_all", lambda sel, log, grace: None)

    assert reaper.run() == 3
    written = json.loads(status.read_text())
    assert (written["exit_code"], written["returncodes"]) == (3, [3])
    assert written["failed_at"] is not None
