"""The stall watchdog (supervisor.liveness) says a stall before it fails the experiment: the notice
names the replica in the running experiment's reason (`phalanx get`), on the console and to the
alert hooks, once, and is taken back when the replicas move again; the failure's reason carries the
replica's last lines. Steps reported count as progress, so a quiet but stepping job is never named."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from phalanx import alerts
from phalanx.spec.model import Stall
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.sql import SqlStore
from phalanx.supervisor.liveness import Liveness, StallNotices, watchdog
from phalanx.supervisor.notices import Notices

BOTH = {"master": None, "worker-0": None}  # pids this machine cannot see: output and steps decide


def _idle(liveness: Liveness, idle: dict[str, float]) -> None:
    now = time.monotonic()
    for name, seconds in idle.items():
        liveness.last_progress[name] = now - seconds
    liveness._checked = 0.0  # the next check looks at once (it reads the process tree once a second)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    s = SqlStore(f"sqlite:///{tmp_path / 'phalanx.db'}", ArtifactStore(str(tmp_path / "artifacts")))
    yield s
    s.close()


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """A webhook on loopback (as Slack's incoming webhook): PHALANX_ALERT_URL points at it; what it
    was POSTed is in the list."""
    got: list[dict[str, Any]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PHALANX_ALERT_URL", f"http://127.0.0.1:{server.server_address[1]}/hook")
    yield got
    server.shutdown()
    server.server_close()


def test_a_stall_is_noticed_once_then_taken_back(
    store: SqlStore, hook: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[threading.Thread] = []
    real_send = alerts.send

    def send(alert: alerts.Alert) -> list[threading.Thread]:  # the hooks' threads, to join
        sent.extend(real_send(alert))
        return sent

    monkeypatch.setattr(alerts, "send", send)
    exp = store.create_experiment(name="a", project="p").id
    said: list[str] = []
    liveness = Liveness(timeout=60, notice=5, notices=StallNotices(Notices(exp, lambda: store, said.append)))
    _idle(liveness, {"master": 9, "worker-0": 7})
    assert liveness.check(BOTH) is None  # past the notice, not the fail time
    text = "stalled: master made no progress (no step, no output, no CPU time) for 9 s (stall_notice 5 s)"
    assert said == [
        f"{text}; also idle, likely waiting for it: worker-0; it fails after 60 s without progress"
    ]
    assert store.get_experiment(exp).reason == said[0]  # `phalanx get`: "status: running (stalled: ...)"
    for thread in sent:
        thread.join(timeout=30)
    assert hook == [
        {
            "kind": "stalled",
            "experiment": exp,
            "replica": "master",
            "text": f"phalanx: experiment {exp}: {said[0]}",
        }
    ]
    _idle(liveness, {"master": 10, "worker-0": 8})
    assert liveness.check(BOTH) is None and len(said) == 1  # said once, not every second
    liveness.output("master")
    _idle(liveness, {"worker-0": 9})
    assert liveness.check(BOTH) is None
    assert said[1:] == ["the stalled replicas make progress again"]
    assert store.get_experiment(exp).reason in ("", None)


def test_a_replica_that_reports_steps_is_not_stalled_though_it_prints_nothing() -> None:
    """A chief that reports a step now and then but prints nothing and idles between them (it waits
    on the workers) makes progress."""
    said: list[str] = []
    liveness = Liveness(timeout=None, notice=5, notices=StallNotices(Notices("e", lambda: None, said.append)))
    step = iter(range(100))

    def steps() -> dict[str, int]:  # a step more at each look
        return {"master": next(step)}

    _idle(liveness, {"master": 9})
    liveness._steps = {"master": -1}
    assert liveness.check({"master": None}, steps) is None
    assert said == []
    assert liveness.check({"master": None}, steps) is None  # within a second: not looked at again
    _idle(liveness, {"master": 9})
    liveness._steps_at = float("-inf")
    liveness._steps = {"master": 0}
    assert liveness.check({"master": None}, lambda: {"master": 0}) is None  # the step stood still
    assert said and said[0].startswith("stalled: master made no progress"), said


def test_the_failure_says_what_the_replica_was_doing() -> None:
    said: list[str] = []
    liveness = Liveness(
        timeout=5,
        notices=StallNotices(Notices("e", lambda: None, said.append)),
        last_lines=lambda name: ["coordinating 2 workers, 100 steps", ""] if name == "master" else [],
    )
    _idle(liveness, {"master": 9})
    reason = liveness.check({"master": None})
    assert reason == (
        "master made no progress (no step, no output, no CPU time) for 9 s (hang_timeout 5 s)"
        "; last lines of its log:\n  coordinating 2 workers, 100 steps"
    )


def test_both_times_off_is_no_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    assert watchdog(Stall(notice=0, fail=0)) is None
    monkeypatch.setenv("PHALANX_STALL_NOTICE", "0")
    monkeypatch.setenv("PHALANX_HANG_TIMEOUT", "0")
    assert watchdog(Stall()) is None
    assert watchdog(Stall(fail=30)) is not None  # the file's time wins over the variable's 0


def test_the_end_of_an_attempt_takes_the_notice_back_without_saying_progress(store: SqlStore) -> None:
    exp = store.create_experiment(name="a", project="p").id
    said: list[str] = []
    liveness = Liveness(timeout=60, notice=5, notices=StallNotices(Notices(exp, lambda: store, said.append)))
    _idle(liveness, {"master": 9})
    assert liveness.check({"master": None}) is None and len(said) == 1
    liveness.close()  # the attempt failed or was stopped: its outcome says what happened
    assert len(said) == 1
    assert store.get_experiment(exp).reason in ("", None)
    assert liveness.last_progress == {}  # the next attempt starts afresh
