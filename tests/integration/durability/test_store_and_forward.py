"""Remote tracking is store-and-forward all the way: what a process could not ship before it exited
(the server was down) is shipped later, by the next reporting process on the host or by
`phalanx sync`; the experiment then reaches its final status. Real server, killed and restarted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.integration.durability.figures import figure
from tests.integration.local.conftest import wait_for
from tests.integration.server.serverproc import Server, clean_env, start_server, stop_server

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


def _script_to_server(
    tmp_path: Path, server: Server, code: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """``code`` run as a script on a laptop (a home of its own, an empty work folder) that reports
    to ``server``; what it printed, and the laptop's environment."""
    client_home, work = tmp_path / "client", tmp_path / "work"
    client_home.mkdir()
    work.mkdir()
    laptop = clean_env(client_home, PHALANX_HOST=server.url, **env)
    done = subprocess.run(
        [sys.executable, "-c", code], env=laptop, capture_output=True, text=True, timeout=120, cwd=work
    )
    assert done.returncode == 0, done.stderr
    return done, laptop


def _flushed(done: subprocess.CompletedProcess[str]) -> str:
    """The experiment of a script that printed ``FLUSH <flush()'s answer> <id>``, once it said True."""
    ok, exp_id = done.stdout.split("FLUSH ", 1)[1].split()[:2]
    assert ok == "True", done.stderr
    return exp_id


SHIPPERS = ["phalanx sync", "the next process"]

# The next reporting process on the host: Task.init ships what earlier processes left in a daemon
# thread; it stays until the leftover spool of ``argv[1]`` is shipped whole (removed), as a
# training script would run on, and fails if that never happens.
NEXT = """
import pathlib, sys, time
from phalanx import Task
t = Task.init("remote", "next")
left = pathlib.Path(sys.argv[2]) / "spool" / sys.argv[1]
end = time.monotonic() + 90
while list(left.glob("*.spool")) and time.monotonic() < end:
    time.sleep(0.05)
t.flush()
if list(left.glob("*.spool")):
    sys.exit("the leftovers were not shipped")
"""


@dataclass
class Exited:
    """One script of the outage: it exited (succeeded) while the server was down."""

    client_home: Path
    env: dict[str, str]
    exp_id: str
    returncode: int
    err: str
    result: dict[str, Any]
    started: float
    exited: float


@dataclass
class Outage:
    server_home: Path
    server: Server
    restart_s: float  # from the scripts' exit to the server answering again
    runs: dict[str, Exited]


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    """One server outage for both ways of shipping: a script per shipper, each with its own client
    home (its own spool, which only its shipper ships), runs while the server is up, reports more
    once it is down and exits before it is back; the server is then restarted on the same port."""
    tmp = tmp_path_factory.mktemp("outage")
    server_home = tmp / "server"
    server_home.mkdir()
    server = start_server(server_home)
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        port = server.url.rsplit(":", 1)[1]
        code = tmp / "code"  # the script's folder, which Task.init snapshots: the script alone
        code.mkdir()
        script = code / "train.py"
        script.write_text(SCRIPT)
        homes = {s: tmp / f"client{i}" for i, s in enumerate(SHIPPERS)}
        marks = {s: tmp / f"marks{i}" for i, s in enumerate(SHIPPERS)}
        envs = {s: clean_env(homes[s], PHALANX_HOST=server.url) for s in SHIPPERS}
        started = {}
        for s in SHIPPERS:
            homes[s].mkdir()
            marks[s].mkdir()
            started[s] = time.monotonic()
            procs[s] = subprocess.Popen(
                [sys.executable, str(script), str(marks[s])],
                env=envs[s],
                stderr=subprocess.PIPE,
                text=True,
                cwd=code,
            )
        for s in SHIPPERS:
            wait_for(
                lambda s=s: (marks[s] / "flushed").exists() or procs[s].poll() is not None,
                what="the first flush",
            )
        ids = {s: (marks[s] / "flushed").read_text() for s in SHIPPERS}
        stop_server(server.proc)  # the outage begins
        for s in SHIPPERS:
            (marks[s] / "down").touch()
        runs = {}
        for s in SHIPPERS:
            _, err = procs[s].communicate(timeout=60)
            exited = time.monotonic()
            result = marks[s] / "result.json"
            runs[s] = Exited(
                homes[s],
                envs[s],
                ids[s],
                procs[s].returncode,
                err,
                json.loads(result.read_text()) if result.exists() else {},
                started[s],
                exited,
            )
        last_exit = max(r.exited for r in runs.values())
        server = start_server(server_home, port=int(port))  # the outage ends
        yield Outage(server_home, server, time.monotonic() - last_exit, runs)
    finally:
        stop_server(server.proc)
        for proc in procs.values():  # a script left waiting by a failed set-up
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.parametrize("shipper", SHIPPERS)
def test_records_left_by_a_process_that_exited_during_an_outage_are_shipped_later(
    outage: Outage, shipper: str, tmp_path: Path
) -> None:
    run, server_home = outage.runs[shipper], outage.server_home
    exp_id, env = run.exp_id, run.env
    assert run.returncode == 0, run.err
    result = run.result
    assert result["up"] is True and result["down"] is False, result
    assert result["down_seconds"] < 30, result  # not its full 60 s (generous: shared cores)
    assert "shipped by the next process here or `phalanx sync`" in run.err
    shipping = time.monotonic()
    if shipper == "phalanx sync":
        done = subprocess.run(
            [sys.executable, "-m", "phalanx.cli.main", "sync"], env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "shipped" in done.stdout
    else:
        other = subprocess.run(
            [sys.executable, "-c", NEXT, exp_id, str(run.client_home)],
            env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,  # (its snapshot: empty)
        )  # fmt: skip
        assert other.returncode == 0, other.stderr
    wait_for(lambda: len(_points(server_home, exp_id)) == 5000, timeout=60, what="every point")
    assert _points(server_home, exp_id) == list(range(5000))  # none lost, none twice
    exp = open_store(Settings(home=server_home)).get_experiment(exp_id)
    assert exp.status == ExperimentStatus.SUCCEEDED
    assert not list((run.client_home / "spool").glob(f"{exp_id}/*.spool"))  # shipped whole: removed
    figure(
        f"server down when the script exits, shipped by {shipper}",
        reported=5000,
        stored=len(_points(server_home, exp_id)),
        duplicated=0,
        status=str(exp.status),
        flush_while_down_s=round(result["down_seconds"], 1),
        # restarting the server included, as when each way had an outage of its own
        seconds_to_final_after_restart=round(outage.restart_s + time.monotonic() - shipping, 1),
        run_s=round(run.exited - run.started, 1),
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server on a store of its own, for the tests below: none of them stops it, and each reports
    from a client home of its own, under an experiment id the others never use."""
    server_home = tmp_path_factory.mktemp("server")
    server = start_server(server_home)
    try:
        yield server
    finally:
        stop_server(server.proc)


def test_phalanx_run_against_a_server_on_another_store_says_so(tmp_path: Path, server: Server) -> None:
    """No dead UI link: the server does not have the experiment, and `phalanx run` says why."""
    client_home = tmp_path / "client"
    client_home.mkdir()
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


def test_what_a_script_ships_to_a_server_never_lands_in_this_machines_store(
    tmp_path: Path, server: Server
) -> None:
    """The spool of a script reporting to a server is the server's from its first record: a local
    read (`phalanx ls`, `phalanx gc`) neither ingests it into the laptop's own store nor warns
    about its files."""
    code = (
        "from phalanx import Task\n"
        "task = Task.init('remote', 'shipped')\n"
        "for i in range(100):\n"
        "    task.get_logger().report_scalar('loss', 'm', 1.0, i)\n"
        "print('FLUSH', task.flush(timeout=60), task.id)\n"
    )
    done, env = _script_to_server(tmp_path, server, code)
    assert _points(server.home, _flushed(done)) == list(range(100))
    local = {k: v for k, v in env.items() if k != "PHALANX_HOST"}  # the laptop's own store
    listed = {}
    for command in ("ls", "gc", "ls"):
        read = subprocess.run(
            [sys.executable, "-m", "phalanx.cli.main", command, "-o", "json"], env=local,
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert read.returncode == 0 and "stored without it" not in read.stderr, read.stderr
        listed[command] = read.stdout
    assert json.loads(listed["ls"]) == []  # after gc too: nothing of it was taken in


def test_a_17_mib_text_does_not_stall_shipping(tmp_path: Path, server: Server) -> None:
    code = (
        "from phalanx import Task\n"
        "task = Task.init('remote', 'huge text')\n"
        "log = task.get_logger()\n"
        "log.report_text('x' * (17 << 20), title='huge')\n"
        "for i in range(1000):\n"
        "    log.report_scalar('loss', 'm', 1.0, i)\n"
        "print('FLUSH', task.flush(timeout=60), task.id)\n"
    )
    exp_id = _flushed(_script_to_server(tmp_path, server, code)[0])
    assert _points(server.home, exp_id) == list(range(1000))
    text = open_store(Settings(home=server.home)).texts(exp_id)[0]["text"]
    assert text.endswith("more characters]") and len(text) < (2 << 20)  # truncated, documented


def test_flush_says_false_with_why_when_the_server_refuses_an_unknown_experiment(
    tmp_path: Path, server: Server
) -> None:
    """A replica reporting to a server that does not have its experiment (another store): the server
    refuses (404), and flush() returns False with the server's reason instead of True."""
    code = (
        "import json\n"
        "from phalanx import Task\n"
        "task = Task.init()\n"
        "task.get_logger().report_scalar('loss', 'm', 1.0, 0)\n"
        "print('RESULT', json.dumps({'ok': task.flush(timeout=30), 'why': task.flush_problems}))\n"
    )
    done = _script_to_server(tmp_path, server, code, PHALANX_EXPERIMENT_ID="0123456789ab")[0]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["ok"] is False, result
    assert any("404" in why and "does not exist" in why for why in result["why"]), result
