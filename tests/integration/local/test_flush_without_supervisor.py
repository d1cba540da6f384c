"""A replica's flush() under `phalanx run` when the supervisor (whose thread ingests) is gone: it
returns at once instead of waiting out its 60 s timeout, and what it wrote is stored by the next
`phalanx` command, exactly once."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Phalanx, wait_for

REPLICA = """
import json, os, signal, time
from pathlib import Path
from phalanx import Task
from phalanx.machine.procs import pid_alive

def put(name, doc):  # whole or not at all: the test polls for it
    Path(name + ".tmp").write_text(json.dumps(doc))
    os.replace(name + ".tmp", name)


task = Task.current_task()
supervisor = int(os.environ["PHALANX_INGESTER_PID"])
task.get_logger().report_scalar("loss", "w", 1.0, 0)
stored = task.flush(timeout=60)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # outlive the stop that follows the supervisor's death
put("ready", {"stored": stored, "supervisor": supervisor})
while pid_alive(supervisor):
    time.sleep(0.05)
task.get_logger().report_scalar("loss", "w", 2.0, 1)
start = time.monotonic()
stored = task.flush(timeout=60)
put("result", {"stored": stored, "seconds": time.monotonic() - start})
"""


def test_flush_returns_at_once_when_the_supervisor_died_and_nothing_is_lost(phalanx: Phalanx) -> None:
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        run:
          cmd: python replica.py
        """
    )
    folder = Path(spec).parent
    (folder / "replica.py").write_text(REPLICA)
    proc = phalanx.start("run", "-f", str(spec))
    ready = json.loads(wait_for(lambda: _read(folder / "ready"), what="the replica's first flush"))
    # local replicas learn the supervisor's pid: its ingester stored the first point
    assert ready == {"stored": True, "supervisor": proc.pid}
    proc.kill()
    proc.communicate(timeout=30)
    result = json.loads(wait_for(lambda: _read(folder / "result"), what="the replica's second flush"))
    assert result["stored"] is False  # durable in the spool, not yet in the store
    assert result["seconds"] < 30  # not its 60 s timeout (generous: two shared cores)
    done = phalanx.cli("metrics", ready_id(phalanx), "-o", "json")
    reported = {k: v for k, v in json.loads(done.stdout).items() if not k.startswith("system/")}
    assert reported == {"loss": {"w": {"steps": [0, 1], "values": [1.0, 2.0]}}}  # system/: the sampler's


def ready_id(phalanx: Phalanx) -> str:
    return str(phalanx.only_experiment().id)


def _read(path: Path) -> str | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return text or None
