"""The server as a control plane, against a real `phalanx server` process: an answered submit runs
exactly once whatever point of the submit the server is SIGKILLed at; a `phalanx run --server`
across a server restart makes one experiment and exits 0; a group controller SIGKILLed while the
server lives is started again and the group ends with exactly its planned trials; a start that
fails after the answer ends the experiment failed with its reason, never left `created`.

The kill harness runs KILL_TRIALS trials (3 here; `PHALANX_KILL_TRIALS=20` for the issue's figure)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import (
    PHALANX,
    TRUSTING,
    Server,
    clean_env,
    running_server,
    start_server,
    stop_server,
    supervisors_gone,
    wait_for,
)

from phalanx.apiclient import Client
from phalanx.bundles import pack
from phalanx.machine.procs import pid_alive

TOKEN = "control-plane-token-0123456789"
KILL_TRIALS = int(os.environ.get("PHALANX_KILL_TRIALS", "3"))
TRIVIAL = """version: 1
kind: experiment
name: trivial
project: plane
run:
  cmd: python -c "print('ran once')"
"""
GROUP_DATA = Path(__file__).parent / "data" / "group"


def api(server: Server, path: str) -> Any:
    req = urllib.request.Request(f"{server.url}/api/v1{path}")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def ended(server: Server, exp_id: str) -> dict[str, Any] | None:
    exp = api(server, f"/experiments/{exp_id}")
    return dict(exp) if exp["status"] in ("succeeded", "failed", "stopped") else None


def port_of(server: Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def kill(server: Server) -> None:
    os.killpg(server.proc.pid, signal.SIGKILL)  # the server's process group: supervisors have their own
    server.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # its jobs run as the server, unboxed: the group's trials write to the test's probe folder
    with running_server(tmp_path_factory.mktemp("shared-server-home"), token=TOKEN, args=TRUSTING) as s:
        yield s


@pytest.fixture
def server(module_server: Server) -> Iterator[Server]:
    """One server for the tests that neither kill it nor count what it holds; each test's
    supervisors and controllers have exited by its end."""
    yield module_server
    supervisors_gone(module_server)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "exp.yml").write_text(TRIVIAL)
    return folder


@pytest.mark.timeout(180 + 120 * KILL_TRIALS)  # a server start and a run per trial, on loaded cores
def test_a_submit_answered_across_server_kills_runs_exactly_once(phalanx_home: Path, project: Path) -> None:
    """Each trial: a submit with its own key; the server SIGKILLed at a random point of it (before,
    during or after its transaction), started again on the same port, the client retrying the same
    key meanwhile. Every answered id is an experiment that runs to its end, once: 0 lost, 0 doubled."""
    rng = random.Random(20261201)
    server = start_server(phalanx_home, token=TOKEN)
    answers: dict[str, str] = {}
    try:
        for trial in range(KILL_TRIALS):
            key = f"kill-trial-{trial}"
            got: dict[str, Any] = {}

            def submit(key: str = key, got: dict[str, Any] = got, url: str = server.url) -> None:
                client = Client(url, TOKEN)
                got["answer"] = client.submit(project / "exp.yml", pack(project), {}, 0, key=key)

            thread = threading.Thread(target=submit)
            thread.start()
            time.sleep(rng.uniform(0.0, 0.6))
            kill(server)
            server = start_server(phalanx_home, token=TOKEN, port=port_of(server))
            thread.join(timeout=180)
            assert "answer" in got, f"trial {trial}: the client gave up"
            answers[key] = str(got["answer"]["id"])
        for key, exp_id in answers.items():
            exp = wait_for(f"{key}'s experiment {exp_id} ended", lambda e=exp_id: ended(server, e))
            assert exp["status"] == "succeeded", (key, exp)
        listed = api(server, "/experiments?limit=500")["items"]
        assert sorted(e["id"] for e in listed) == sorted(answers.values()), "lost or doubled submits"
        for exp_id in answers.values():  # each ran once: one attempt, one console line
            lines = api(server, f"/experiments/{exp_id}/logs")["lines"]
            assert [ln["text"] for ln in lines if "ran once" in ln["text"]] == ["ran once"], exp_id
        supervisors_gone(server)
    finally:
        stop_server(server.proc)


def test_phalanx_run_across_a_server_restart_makes_one_experiment_and_exits_0(
    phalanx_home: Path, project: Path, tmp_path: Path
) -> None:
    server = start_server(phalanx_home, token=TOKEN)
    port = port_of(server)
    stop_server(server.proc)  # down when the user submits; back some seconds later
    client_home = tmp_path / "client-home"
    client_home.mkdir()
    cli = subprocess.Popen(
        [str(PHALANX), "run", "-f", str(project / "exp.yml"), "--server", server.url, "--follow"],
        env=clean_env(client_home, PHALANX_TOKEN=TOKEN),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # back once the client has found it down and says it retries (the event, not a guessed delay)
    assert cli.stderr is not None
    before = ""
    try:
        while "retrying for up to 120 s" not in before:
            line = cli.stderr.readline()
            assert line, f"the client ended before it retried:\n{before}"
            before += line
    except BaseException:
        cli.kill()
        cli.wait(timeout=30)
        raise
    server = start_server(phalanx_home, token=TOKEN, port=port)
    try:
        out, err = cli.communicate(timeout=300)
        err = before + err
        assert cli.returncode == 0, out + err
        assert err.count("retrying for up to 120 s with the same Idempotency-Key") == 1, err
        assert "Traceback" not in err
        items = api(server, "/experiments")["items"]
        assert [e["id"] for e in items] == [out.splitlines()[0].strip()]
        assert items[0]["status"] == "succeeded"
        supervisors_gone(server)
    finally:
        if cli.poll() is None:
            cli.kill()
        stop_server(server.proc)


def test_a_start_that_fails_after_the_answer_fails_the_experiment_with_its_reason(
    server: Server, project: Path
) -> None:
    (project / "exp.yml").write_text(TRIVIAL + "inputs:\n  - name: nowhere\n    dataset: nowhere@latest\n")
    answer = Client(server.url, TOKEN).submit(project / "exp.yml", pack(project), {}, 0)
    assert answer["created"] is True
    exp = wait_for("the refused start recorded", lambda: ended(server, answer["id"]), 120)
    assert exp["status"] == "failed"
    assert exp["reason"].startswith("the server could not start it: ")
    assert "nowhere" in exp["reason"], exp["reason"]


@pytest.mark.timeout(600)
def test_a_group_controller_killed_while_the_server_lives_is_started_again(
    server: Server, tmp_path: Path
) -> None:
    pytest.importorskip("optuna")
    folder = tmp_path / "group"
    shutil.copytree(GROUP_DATA, folder)
    probe = tmp_path / "probe"
    probe.mkdir()
    answer = Client(server.url, TOKEN).submit(folder / "group.yml", pack(folder), {"probe": str(probe)}, 0)
    group_id = answer["id"]
    wait_for("the first trial running", lambda: (probe / "runs.log").exists())
    controller = wait_for("the controller", lambda: api(server, f"/groups/{group_id}")["controller_pid"])
    os.kill(controller, signal.SIGKILL)
    wait_for("the controller gone", lambda: not pid_alive(controller), 30)
    adopted = wait_for(
        "a new controller, while the server lives",
        lambda: (pid := api(server, f"/groups/{group_id}")["controller_pid"]) != controller and pid,
        60,
    )
    assert pid_alive(adopted)
    (probe / "go").touch()
    group = wait_for(
        "the group ended",
        lambda: (
            (g := api(server, f"/groups/{group_id}"))["status"] in ("succeeded", "failed", "stopped") and g
        ),
    )
    assert group["status"] == "succeeded"
    assert sorted(t["params"]["x"] for t in group["trials"]) == [0.1, 0.2, 0.3, 0.4]
    runs = (probe / "runs.log").read_text().splitlines()
    assert sorted(float(line.split()[0]) for line in runs) == [0.1, 0.2, 0.3, 0.4]  # each once
