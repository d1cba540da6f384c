"""The pure parts of one door for `phalanx queue` and this machine's commands: the queue doc both
doors give (``with_targets``), the table's rows from it (a masked row of a server, a run waiting on a
cluster), and `gc` after `phalanx login`: it says it acts on this machine, and refuses --server."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from phalanx import logins
from phalanx.cli.main import main
from phalanx.cli.queue import HEADERS, table_rows
from phalanx.queue import with_targets


def _waiting(**over: Any) -> dict[str, Any]:
    row = {
        "experiment_id": "3f2a",
        "name": "mnist",
        "project": "vision",
        "position": 1,
        "priority": 0,
        "needs": {"cpus": 1, "gpus": 0, "memory_mib": 0},
        "pid": 4242,
        "since": time.time(),
        "why": "project vision at its 1-core quota",
    }
    return {**row, **over}


def test_both_doors_shape_the_queue_alike_and_a_masked_run_shows_dashes() -> None:
    masked = _waiting(experiment_id=None, name="(a run of another project)", project=None, pid=None)
    doc = with_targets({"running": [], "queued": [_waiting(), masked]}, None)
    assert doc["target"] == "local" and doc["elsewhere"] == []
    assert [r["target"] for r in doc["queued"]] == ["local", "local"]
    on_slurm = {
        "experiment_id": "9c1b",
        "name": "big",
        "project": "vision",
        "target": "hpc",
        "state": "pending",
        "why": "Priority",
        "since": time.time(),
    }
    doc["elsewhere"] = [on_slurm]
    rows = table_rows(doc)
    assert all(len(r) == len(HEADERS) for r in rows)
    assert rows[0][:5] == ["1", "3f2a", "mnist", "vision", "queued"] and rows[0][-1].endswith("quota")
    assert rows[1][1] == "-" and rows[1][3] == "-" and rows[1][7] == "-"
    assert rows[2][1:7] == ["9c1b", "big", "vision", "pending", "-", "on hpc"] and rows[2][-1] == "Priority"


def test_gc_after_login_says_this_machine_and_refuses_the_server(
    phalanx_home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    logins.save(phalanx_home, logins.Login("http://gpu-box:8000", None))
    with pytest.raises(SystemExit) as ended:
        main(["gc", "--server", "http://gpu-box:8000", "-o", "json"])
    out, err = capfd.readouterr()
    assert ended.value.code == 2 and out == ""
    assert "`phalanx gc` acts on this machine only" in err and "--gc-hours" in err
    with pytest.raises(SystemExit) as ended:
        main(["gc", "-o", "json"])
    out, err = capfd.readouterr()
    assert ended.value.code in (0, None) and err == "phalanx: on this machine\n" and out.startswith("{")
