"""Every experiment reaches a final status: a killed recorder (plain script, `phalanx run`) is
found by the next reader; a store that is down when the replicas end does not crash `phalanx run`."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from tests.integration.durability.figures import figure
from tests.integration.local.conftest import Phalanx, wait_for
from tests.support import postgres
from tests.support.sandbox import Sandbox, wait_gone

from phalanx.domain import ExperimentStatus

KILL_SELF = """
import os, signal, sys
from phalanx import Task
task = Task.init("faults", "dies")
task.get_logger().report_scalar("loss", "master", 0.5, 0)
task.flush()
open("ids.txt", "w").write("ID " + task.id + " INGESTER " + os.environ["PHALANX_INGESTER_PID"])
{death}
"""


@pytest.mark.parametrize(
    ("death", "expected"),
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
        ("import ctypes; ctypes.string_at(0)", "crashed: Fatal Python error: Segmentation fault"),
    ],
)
def test_a_plain_script_that_dies_is_marked_failed_with_how(
    sandbox: Sandbox, death: str, expected: str
) -> None:
    done = sandbox.run(KILL_SELF.replace("{death}", death))
    assert done.returncode < 0, done.stderr  # died by a signal
    ids = (sandbox.home.parent / "ids.txt").read_text()  # (its console dies with it: see item 6)
    exp_id = ids.split("ID ", 1)[1].split()[0]
    started = time.monotonic()
    wait_gone(int(ids.split("INGESTER ", 1)[1].split()[0]))  # it reconciles as it leaves
    exp = sandbox.store().get_experiment(exp_id)
    assert exp.status == ExperimentStatus.FAILED, exp
    assert expected in (exp.reason or ""), exp.reason
    figure(
        f"plain script dies ({expected})",
        status=str(exp.status),
        seconds_to_final=round(time.monotonic() - started, 1),
    )


def test_a_sigkilled_phalanx_run_is_marked_failed_by_the_next_reader(phalanx: Phalanx) -> None:
    marker = phalanx.tmp / "started"
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        run:
          cmd: python -c "import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(600)"
        """
    )
    proc = phalanx.start("run", "-f", str(spec))
    wait_for(marker.exists, what="the replica to start")
    exp = wait_for(
        lambda: next(
            (e for e in phalanx.store().list_experiments().items if e.status == ExperimentStatus.RUNNING),
            None,
        ),
        what="the experiment to be running",
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    shown = phalanx.cli("ls", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    exp = phalanx.store().get_experiment(exp.id)
    assert exp.status == ExperimentStatus.FAILED, (exp, shown.stdout)
    assert "its supervisor (pid" in (exp.reason or "") and "killed" in (exp.reason or "")
    figure("phalanx run SIGKILLed", status=str(exp.status), final_at="the next read command")


def test_the_store_down_when_the_replicas_end_is_no_traceback_and_the_outcome_lands_later(
    phalanx: Phalanx,
) -> None:
    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = postgres.start_postgres()
    try:
        url = server.create_database()
        phalanx.env["PHALANX_DB_URL"] = url
        phalanx.env["PHALANX_STORE_RETRY_SECONDS"] = "1"
        ready, go = phalanx.tmp / "ready", phalanx.tmp / "go"
        phalanx.spec(
            f"""
            import os, pathlib, time
            pathlib.Path({str(ready)!r} + os.environ["PHALANX_REPLICA"]).touch()
            while not pathlib.Path({str(go)!r}).exists():
                time.sleep(0.05)
            print("done")
            """,
            name="wait.py",
        )
        spec = phalanx.spec(
            """
            version: 1
            kind: experiment
            framework: pytorch
            environment:
              replicas:
                n_workers: 1
            run:
              cmd: python wait.py
            """
        )
        proc = phalanx.start("run", "-f", str(spec))
        wait_for(
            lambda: (
                proc.poll() is not None or all(Path(f"{ready}{r}").exists() for r in ("master", "worker-0"))
            ),
            what="replicas",
        )
        assert proc.poll() is None, proc.communicate()
        from phalanx.config import Settings
        from phalanx.store import open_store

        store = open_store(Settings(home=phalanx.home, db_url=url))
        wait_for(
            lambda: [e for e in store.list_experiments().items if e.status == ExperimentStatus.RUNNING],
            what="the experiment to be running",
        )
        store.engine.dispose()
        postgres.pause(server)
        go.touch()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err
        assert "store cannot be reached" in out + err
        postgres.resume(server)
        shown = phalanx.cli("ls")
        assert shown.returncode == 0, shown.stderr
        exp = store.list_experiments().items[0]
        assert exp.status == ExperimentStatus.SUCCEEDED, exp
        figure(
            "store (PostgreSQL) down when the replicas end",
            exit_code=proc.returncode,
            status=str(exp.status),
            final_at="the next read command after the database is back",
        )
        assert {r.name: str(r.state) for r in store.list_replicas(exp.id)} == {
            "master": "succeeded",
            "worker-0": "succeeded",
        }
    finally:
        server.stop()
        os.environ.pop("PHALANX_DB_URL", None)


LAST_WORDS = """
import os, signal, sys
from phalanx import Task
task = Task.init("faults", "last words")
open("ids.txt", "w").write("ID " + task.id + " INGESTER " + os.environ["PHALANX_INGESTER_PID"])
print("last words on stdout", flush=True)
print("last words on stderr", file=sys.stderr, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_last_lines_before_a_sigkill_reach_the_terminal_and_the_store(sandbox: Sandbox) -> None:
    done = sandbox.run(LAST_WORDS)
    assert done.returncode == -signal.SIGKILL
    ids = (sandbox.home.parent / "ids.txt").read_text()
    exp_id = ids.split("ID ", 1)[1].split()[0]
    wait_gone(int(ids.split("INGESTER ", 1)[1].split()[0]))
    assert "last words on stdout" in done.stdout and "last words on stderr" in done.stderr
    lines = {(line.stream, line.text) for line in sandbox.store().logs(exp_id)}
    assert ("stdout", "last words on stdout") in lines and ("stderr", "last words on stderr") in lines


READER_KILLED = """
import os, signal, sys, time
from phalanx import Task
task = Task.init("faults", "reader killed")
reader = int(os.environ["PHALANX_INGESTER_PID"])
os.kill(reader, signal.SIGKILL)  # the console's reader dies (with nothing of ours in flight)
def alive(pid):  # gone, or a zombie: dead (reaped between two looks is gone too)
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
while alive(reader):
    time.sleep(0.01)
print("before", flush=True)
for i in range(20000):                                              # more than a pipe holds
    sys.stdout.write(f"after {i}" + chr(10))  # one write a line; no EPIPE, no hang
    sys.stdout.flush()
time.sleep(1)
print("done", flush=True)
"""


def test_a_dead_console_reader_does_not_break_the_scripts_prints(sandbox: Sandbox) -> None:
    done = sandbox.run(READER_KILLED, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = set(done.stdout.splitlines())
    assert {"before", "done"} <= lines, done.stdout[-2000:]
    missing = [i for i in range(20000) if f"after {i}" not in lines]
    assert not missing, (len(missing), missing[:5], done.stderr[-1000:])  # none lost in the switch
