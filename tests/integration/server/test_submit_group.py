"""A `kind: group` file submitted to a real `phalanx server` runs its controller as a process of its
own; after the server and that controller are both killed mid-search, the restarted server starts
the controller again and the search finishes with exactly the planned trials, each run once.
`phalanx run -f` of a group file runs the group locally too (as `phalanx group run`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import _processes_under
from tests.integration.server.serverproc import (
    PHALANX,
    TRUSTING,
    Server,
    clean_env,
    start_server,
    stop_server,
    wait_for,
)

from phalanx.bundles import pack
from phalanx.cli.remote import Client
from phalanx.machine.procs import pid_alive

pytest.importorskip("optuna")

DATA = Path(__file__).parent / "data" / "group"
TOKEN = "group-test-token-0123456789"
PLANNED = [0.4, 0.1, 0.3, 0.2]
LOCAL_PLAN = [0.4, 0.1]


def api(server: Server, path: str) -> Any:
    req = urllib.request.Request(f"{server.url}/api/v1{path}")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def starts(probe: Path) -> list[float]:
    log = probe / "runs.log"
    return [float(line.split()[0]) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_group_on_the_server_finishes_after_a_restart_with_exactly_the_planned_trials(
    phalanx_home: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    shutil.copytree(DATA, project)
    probe = tmp_path / "probe"
    probe.mkdir()
    first = start_server(phalanx_home, token=TOKEN, args=TRUSTING)
    try:
        answer = Client(first.url, TOKEN).submit(
            project / "group.yml", pack(project), {"probe": str(probe)}, 0
        )
        assert answer["kind"] == "group"
        group_id = answer["id"]
        wait_for("the first trial running", lambda: len(starts(probe)) == 1)
        controller = wait_for(
            "the controller's pid", lambda: api(first, f"/groups/{group_id}")["controller_pid"]
        )
    finally:
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=30)
    assert pid_alive(controller)  # its own process: the server's end did not end it
    os.kill(controller, signal.SIGKILL)  # and now it is gone too: the next server must start one
    wait_for("the controller gone", lambda: not pid_alive(controller), 30)

    second = start_server(phalanx_home, token=TOKEN, args=TRUSTING)
    try:
        adopted = wait_for(
            "a new controller",
            lambda: (pid := api(second, f"/groups/{group_id}")["controller_pid"]) != controller and pid,
        )
        assert pid_alive(adopted)
        (probe / "go").touch()
        group = wait_for(
            "the group ended",
            lambda: (
                (g := api(second, f"/groups/{group_id}"))["status"] in ("succeeded", "failed", "stopped")
                and g
            ),
        )
        assert group["status"] == "succeeded"
        assert sorted(t["params"]["x"] for t in group["trials"]) == sorted(PLANNED)
        assert {t["state"] for t in group["trials"]} == {"done"}
        assert sorted(starts(probe)) == sorted(PLANNED)  # every planned trial ran, and once
        assert group["best"]["params"]["x"] == 0.1
        wait_for(
            "every supervisor and controller exited",
            lambda: not [p for p, _ in _processes_under(second.home) if p != second.proc.pid],
            120,
        )
    finally:
        stop_server(second.proc)


def test_phalanx_run_of_a_group_file_runs_the_group(phalanx_home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(DATA, project)
    # two of the grid's four: a group of several trials is what this checks, not the grid's size
    spec = project / "group.yml"
    spec.write_text(spec.read_text().replace("values: [0.4, 0.1, 0.3, 0.2]", f"values: {LOCAL_PLAN}"))
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "go").touch()
    done = subprocess.run(
        [str(PHALANX), "run", "-f", str(project / "group.yml"), "--param", f"probe={probe}", "-o", "json"],
        env=clean_env(phalanx_home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    group = json.loads(done.stdout)
    assert group["status"] == "succeeded" and len(group["trials"]) == len(LOCAL_PLAN)
    assert sorted(starts(probe)) == sorted(LOCAL_PLAN)
    # the last trial's supervisor tidies up for a moment after its status is final
    wait_for("every supervisor exited", lambda: not _processes_under(phalanx_home), 120)
