"""`phalanx alert` on a real `phalanx server`: a hook added from the CLI hears, once and signed, that
an experiment submitted to the server failed (its supervisor records the end; the server's
deliverer sends it), through a receiver on loopback that answers 500 twice, and the delivery log
shows the three tries; a hook told of group.finished hears, once, that a small group on the server
finished, with its best trial. Without a server, `phalanx alert` exits 2 saying why."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import (
    TRUSTING,
    Server,
    running_server,
    supervisors_gone,
)
from tests.integration.server.test_remote_commands import ok, phalanx, wait_done
from tests.support.webhooks import ALLOW_LOOPBACK, Receiver

TOKEN = "remote-commands-token-0123456789"  # what the borrowed helpers send
SECRET = "integration-hook-secret-0123456789"
DOOMED = """version: 1
kind: experiment
name: doomed
project: vision
run:
  cmd: python -c "import sys; print('about to fail'); sys.exit(3)"
"""

HANGING = """version: 1
kind: experiment
name: hanging
project: vision
run:
  cmd: python -c "import time; print('loading the data', flush=True); time.sleep(3600)"
  stall_notice: 2
  hang_timeout: 8
"""

SEARCH = """version: 1
kind: group
name: two-xs
project: vision
hptuning:
  concurrency: 2
  grid_search: {}
  metric: {name: loss, optimization: minimize}
  matrix:
    x: {values: [0.3, 0.1]}
run:
  cmd: python trial.py {{ x }}
"""


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("alerts-server-home")
    with running_server(home, token=TOKEN, args=[*TRUSTING, *ALLOW_LOOPBACK, "--alert-backoff", "0.2"]) as s:
        yield s


@pytest.fixture
def server(module_server: Server) -> Iterator[Server]:
    """One server for the module: each test's hook hears only of its own receiver's events (an
    experiment's failure, a group's end), and each test leaves no supervisor behind."""
    yield module_server
    supervisors_gone(module_server)


def test_a_failed_experiments_webhook_survives_a_receiver_that_answers_500_twice(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    laptop = tmp_path / "laptop"
    remote = ("--server", server.url)
    (tmp_path / "doomed.yml").write_text(DOOMED)
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    add = [
        "alert",
        "add",
        "--project",
        "vision",
        "--url",
        "",
        "--on",
        "failed",
        "--secret-from-env",
        "HOOK_SECRET",
    ]
    with Receiver([500, 500]) as receiver:
        add[5] = receiver.url
        hook = json.loads(ok(phalanx(laptop, *add, "-o", "json", *remote, token=TOKEN)).stdout)["id"]
        r = ok(phalanx(laptop, "run", "-f", str(tmp_path / "doomed.yml"), *remote, token=TOKEN))
        exp_id = r.stdout.split()[0]
        assert wait_done(laptop, exp_id, *remote)["status"] == "failed"
        got = receiver.wait_for(3)
    assert len(got) == 3 and all(g.signed_by(SECRET) for g in got)
    assert len({g.headers["x-phalanx-delivery"] for g in got}) == 1  # one delivery, tried three times
    body = json.loads(got[-1].body)
    assert (body["event"], body["experiment_id"], body["project"]) == ("experiment.failed", exp_id, "vision")
    assert (body["replica"], body["reason"]) == ("master", "exited with code 3")  # the failing replica's
    assert body["url"] == f"{server.url.rstrip('/')}/experiments/{exp_id}"

    (delivery,) = _settled(laptop, hook, remote)
    assert delivery["state"] == "delivered"
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 500, 200]
    listed = ok(phalanx(laptop, "alert", "ls", *remote, token=TOKEN)).stdout
    assert hook in listed and "failed" in listed
    assert (
        ok(phalanx(laptop, "alert", "rm", hook, *remote, token=TOKEN)).stdout
        == f"alert hook {hook} removed\n"
    )


def test_a_stalled_replica_is_told_once_by_name_then_the_hang_that_failed_it(
    server: Server, tmp_path: Path
) -> None:
    """A replica that prints a line, then sleeps (no step, no output, no CPU): the hook hears
    ``experiment.stalled`` naming it after the file's stall_notice while the experiment runs, then
    its failure when hang_timeout ends it: one delivery each, signed."""
    laptop = tmp_path / "laptop"
    remote = ("--server", server.url)
    (tmp_path / "hanging.yml").write_text(HANGING)
    with Receiver([]) as receiver:
        add = ["alert", "add", "--project", "vision", "--url", receiver.url, "--on", "stalled,failed"]
        added = json.loads(ok(phalanx(laptop, *add, "-o", "json", *remote, token=TOKEN)).stdout)
        r = ok(phalanx(laptop, "run", "-f", str(tmp_path / "hanging.yml"), *remote, token=TOKEN))
        exp_id = r.stdout.split()[0]
        assert wait_done(laptop, exp_id, *remote)["status"] == "failed"
        log = _settled(laptop, added["id"], remote)
        got = receiver.wait_for(2)
    log.sort(key=lambda d: d["created_at"])  # the log lists the newest first
    assert [d["event"] for d in log] == ["experiment.stalled", "experiment.failed"]  # once each
    assert all(d["state"] == "delivered" for d in log)
    assert [g.headers["x-phalanx-event"] for g in got] == ["experiment.stalled", "experiment.failed"]
    assert all(g.signed_by(added["secret"]) for g in got)
    stalled = json.loads(got[0].body)
    assert (stalled["experiment_id"], stalled["replica"], stalled["status"]) == (exp_id, "master", "stalled")
    assert stalled["reason"].startswith("master made no progress (no step, no output, no CPU time) for")
    assert stalled["text"].startswith(f"phalanx: experiment hanging ({exp_id}) of vision stalled: master")


def test_a_finished_groups_webhook_names_its_best_trial(server: Server, tmp_path: Path) -> None:
    """Two one-replica trials of a trivial script on the server: the hook told only of
    group.finished hears of the group once (its first try answered 500), not of the trials."""
    laptop, project = tmp_path / "laptop", tmp_path / "project"
    project.mkdir()
    (project / "group.yml").write_text(SEARCH)
    (project / "trial.py").write_text(
        "import sys\nfrom phalanx import log_metrics\nlog_metrics(step=1, loss=float(sys.argv[1]))\n"
    )
    remote = ("--server", server.url)
    with Receiver([500]) as receiver:
        add = ["alert", "add", "--project", "vision", "--url", receiver.url, "--on", "group.finished"]
        added = json.loads(ok(phalanx(laptop, *add, "-o", "json", *remote, token=TOKEN)).stdout)
        assert added["events"] == ["group.finished"]
        run = ["run", "-f", str(project / "group.yml"), "--follow", "-o", "json", *remote]
        group = json.loads(ok(phalanx(laptop, *run, token=TOKEN)).stdout)
        # any other delivery (a trial's end, the group's end again) was due with the first try and
        # sent in the same round, so before the retry that comes second
        got = receiver.wait_for(2)
    assert group["status"] == "succeeded" and group["best"]["params"] == {"x": 0.1}, group
    assert len(got) == 2 and all(g.signed_by(added["secret"]) for g in got)
    assert len({g.headers["x-phalanx-delivery"] for g in got}) == 1  # one delivery, tried twice
    assert {g.headers["x-phalanx-event"] for g in got} == {"group.finished"}
    body = json.loads(got[-1].body)
    assert (body["group_id"], body["project"], body["status"]) == (group["id"], "vision", "succeeded")
    assert body["best"] == group["best"] | {"metric": "loss"}  # as `phalanx group get` shows it
    assert body["counts"]["done"] == 2
    assert body["url"] == f"{server.url.rstrip('/')}/groups/{group['id']}"


def _settled(laptop: Path, hook: str, remote: tuple[str, ...]) -> list[dict[str, Any]]:
    """The hook's delivery log once nothing in it is pending (a try is recorded after the receiver
    answered it); the deadline is a safety net only."""
    deadline = time.monotonic() + 120
    while True:
        r = ok(phalanx(laptop, "alert", "deliveries", hook, "-o", "json", *remote, token=TOKEN))
        log: list[dict[str, Any]] = json.loads(r.stdout)
        if all(d["state"] != "pending" for d in log) or time.monotonic() > deadline:
            return log
        time.sleep(0.2)


def test_without_a_server_alert_says_where_hooks_live(tmp_path: Path) -> None:
    r = phalanx(tmp_path / "home", "alert", "ls")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "`phalanx login URL` first, or give --server URL" in r.stderr
