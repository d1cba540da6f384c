"""flush() is bounded by what can still happen: a stopped supervisor (its ingester) answers nothing,
so flush() says False at once instead of blocking its full 60 s; the records stay in the spool and
are stored when the supervisor runs again."""

from __future__ import annotations

import json
import os
import signal

from tests.integration.durability.figures import figure
from tests.integration.local.conftest import Phalanx, wait_for

from phalanx.domain import ExperimentStatus

SCRIPT = """
import json, pathlib, time
from phalanx import Task
marks = pathlib.Path({marks!r})
task = Task.init()
log = task.get_logger()
(marks / "ready").touch()
while not (marks / "go").exists():
    time.sleep(0.02)
for i in range(1000):
    log.report_scalar("loss", "m", 1.0, i)
t = time.monotonic()
ok = task.flush(timeout=180)
(marks / "result.json").write_text(json.dumps({{"ok": ok, "seconds": time.monotonic() - t}}))
"""


def test_flush_does_not_block_on_a_stopped_supervisor(phalanx: Phalanx) -> None:
    marks = phalanx.tmp / "marks"
    marks.mkdir()
    phalanx.spec(SCRIPT.format(marks=str(marks)), name="train.py")
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python train.py\n")
    proc = phalanx.start("run", "-f", str(spec))
    wait_for(lambda: (marks / "ready").exists() or proc.poll() is not None, what="the replica")
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGSTOP)  # `phalanx run` suspended (Ctrl-Z)
    try:
        (marks / "go").touch()
        wait_for(lambda: (marks / "result.json").exists(), timeout=120, what="flush() to return")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    result = json.loads((marks / "result.json").read_text())
    assert result["ok"] is False and result["seconds"] < 60, result  # not its 180 s timeout
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    exp = phalanx.only_experiment()
    assert exp.status == ExperimentStatus.SUCCEEDED
    assert phalanx.store().metrics(exp.id)["loss"]["m"].steps == list(range(1000))  # stored after all
    figure(
        "supervisor SIGSTOPped during flush()",
        reported=1000,
        stored=1000,
        flush=result["ok"],
        flush_s=round(result["seconds"], 2),
    )
