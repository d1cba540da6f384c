"""Remote tracking is store-and-forward all the way: what a process could not ship before it exited
(the server was down) is shipped later, by the next reporting process on the host or by
`phalanx sync`; the experiment then reaches its final status. Real server, killed and restarted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.integration.durability.figures import figure
from tests.integration.local.conftest import wait_for
from tests.integration.server.serverproc import clean_env, start_server, stop_server

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.store import open_store

SCRIPT = """
import json, pathlib, sys, time
from phalanx import Task
marks = pathlib.Path(sys.argv[1])
task = Task.init("remote", "outage")
log = task.get_logger()
for i in range(1000):
    log.report_scalar("loss", "m", 1.0, i)
result = {"id": task.id, "up": task.flush()}
(marks / "flushed").write_text(task.id)
while not (marks / "down").exists():
    time.sleep(0.02)
for i in range(1000, 5000):
    log.report_scalar("loss", "m", 1.0, i)
t = time.monotonic()
result["down"] = task.flush()
result["down_seconds"] = time.monotonic() - t
(marks / "result.json").write_text(json.dumps(result))
"""  # exits (succeeded) while the server is still down


def _points(server_home: Path, exp_id: str) -> list[int]:
    store = open_store(Settings(home=server_home))
    try:
        return store.metrics(exp_id)["loss"]["m"].steps
    except KeyError:
        return []


@pytest.mark.parametrize("shipper", ["phalanx sync", "the next process"])
def test_records_left_by_a_process_that_exited_during_an_outage_are_shipped_later(
    tmp_path: Path, shipper: str
) -> None:
    import json

    server_home, client_home, marks = tmp_path / "server", tmp_path / "client", tmp_path / "marks"
    for d in (server_home, client_home, marks):
        d.mkdir()
    server = start_server(server_home)
    port = server.url.rsplit(":", 1)[1]
    env = clean_env(client_home, PHALANX_HOST=server.url)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(marks)], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: (marks / "flushed").exists() or proc.poll() is not None, what="the first flush")
        exp_id = (marks / "flushed").read_text()
        stop_server(server.proc)  # the outage begins
        (marks / "down").touch()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        exited = time.monotonic()
        result = json.loads((marks / "result.json").read_text())
        assert result["up"] is True and result["down"] is False, result
        assert result["down_seconds"] < 30, result  # not its full 60 s (generous: shared cores)
        assert "shipped by the next process here or `phalanx sync`" in err
        server = start_server(server_home, port=int(port))  # the outage ends
        if shipper == "phalanx sync":
            done = subprocess.run(
                [sys.executable, "-m", "phalanx.cli.main", "sync"], env=env, capture_output=True, text=True,
                timeout=120,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert "shipped" in done.stdout
        else:
            other = subprocess.run(
                [sys.executable, "-c", "from phalanx import Task; t = Task.init('remote', 'next'); "
                 "import time; time.sleep(3); t.flush()"],
                env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert other.returncode == 0, other.stderr
        wait_for(lambda: len(_points(server_home, exp_id)) == 5000, timeout=60, what="every point")
        assert _points(server_home, exp_id) == list(range(5000))  # none lost, none twice
        exp = open_store(Settings(home=server_home)).get_experiment(exp_id)
        assert exp.status == ExperimentStatus.SUCCEEDED
        assert not list((client_home / "spool").glob(f"{exp_id}/*.spool"))  # shipped whole: removed
        figure(
            f"server down when the script exits, shipped by {shipper}",
            reported=5000,
            stored=len(_points(server_home, exp_id)),
            duplicated=0,
            status=str(exp.status),
            flush_while_down_s=round(result["down_seconds"], 1),
            seconds_to_final_after_restart=round(time.monotonic() - exited, 1),
            run_s=round(exited - started, 1),
        )
    finally:
        stop_server(server.proc)


def test_phalanx_run_against_a_server_on_another_store_says_so(tmp_path: Path) -> None:
    """No dead UI link: the server does not have the experiment, and `phalanx run` says why."""
    server_home, client_home = tmp_path / "server", tmp_path / "client"
    server_home.mkdir()
    client_home.mkdir()
    server = start_server(server_home)
    try:
        spec = tmp_path / "polyaxonfile.yml"
        spec.write_text("version: 1\nkind: experiment\nrun:\n  cmd: python -c \"print('hi')\"\n")
        env = clean_env(client_home, PHALANX_HOST=server.url)
        done = subprocess.run(
            [sys.executable, "-m", "phalanx.cli.main", "run", "-f", str(spec)], env=env, capture_output=True,
            text=True, timeout=180, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "does not know experiment" in done.stderr and "another store" in done.stderr, done.stderr
        assert "to see it in the web UI" not in done.stderr
    finally:
        stop_server(server.proc)


def test_a_17_mib_text_does_not_stall_shipping(tmp_path: Path) -> None:
    server_home, client_home = tmp_path / "server", tmp_path / "client"
    server_home.mkdir()
    client_home.mkdir()
    server = start_server(server_home)
    try:
        code = (
            "from phalanx import Task\n"
            "task = Task.init('remote', 'huge text')\n"
            "log = task.get_logger()\n"
            "log.report_text('x' * (17 << 20), title='huge')\n"
            "for i in range(1000):\n"
            "    log.report_scalar('loss', 'm', 1.0, i)\n"
            "print('FLUSH', task.flush(timeout=60), task.id)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], env=clean_env(client_home, PHALANX_HOST=server.url),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        ok, exp_id = done.stdout.split("FLUSH ", 1)[1].split()[:2]
        assert ok == "True", done.stderr
        assert _points(server_home, exp_id) == list(range(1000))
        text = open_store(Settings(home=server_home)).texts(exp_id)[0]["text"]
        assert text.endswith("more characters]") and len(text) < (2 << 20)  # truncated, documented
    finally:
        stop_server(server.proc)


def test_flush_says_false_with_why_when_the_server_refuses_an_unknown_experiment(tmp_path: Path) -> None:
    """A replica reporting to a server that does not have its experiment (another store): the server
    refuses (404), and flush() returns False with the server's reason instead of True."""
    server_home, client_home = tmp_path / "server", tmp_path / "client"
    server_home.mkdir()
    client_home.mkdir()
    server = start_server(server_home)
    try:
        code = (
            "import json\n"
            "from phalanx import Task\n"
            "task = Task.init()\n"
            "task.get_logger().report_scalar('loss', 'm', 1.0, 0)\n"
            "print('RESULT', json.dumps({'ok': task.flush(timeout=30), 'why': task.flush_problems}))\n"
        )
        env = clean_env(client_home, PHALANX_HOST=server.url, PHALANX_EXPERIMENT_ID="0123456789ab")
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.split("RESULT ", 1)[1])
        assert result["ok"] is False, result
        assert any("404" in why and "does not exist" in why for why in result["why"]), result
    finally:
        stop_server(server.proc)
