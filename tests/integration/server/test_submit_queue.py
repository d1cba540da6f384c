"""The server's queue with real processes: a `phalanx server` pinned to two cores (so its machine's
ledger sees a two-core machine, whatever this one has) runs what is submitted to it through the
ledger and queue its supervisors share.

Replicas take one core each, record their cores and when they ran (inside the replica:
os.sched_getaffinity), and wait (bounded) for a file the test creates, so what runs and what waits at
each moment is decided by the test, not by timing.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import (
    TRUSTING,
    Server,
    start_server,
    stop_server,
    supervisors_gone,
    wait_for,
)

from phalanx.bundles import digest, pack
from phalanx.cli.remote import Client

DATA = Path(__file__).parent / "data" / "queue"
TOKEN = "queue-test-token-0123456789"
CORES = sorted(os.sched_getaffinity(0))[:2]
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")
ENDED = ("succeeded", "failed", "stopped")


def api(server: Server, path: str) -> Any:
    req = urllib.request.Request(f"{server.url}/api/v1{path}")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def statuses(server: Server) -> dict[str, str]:
    return {e["id"]: e["status"] for e in api(server, "/experiments?limit=100")["items"]}


class Probe:
    """The folder replicas write runs.log to, and the files they wait for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()

    def runs(self) -> list[tuple[str, float, str, str, frozenset[int]]]:
        """(event, time, experiment, replica, cores) per line of runs.log."""
        path = self.root / "runs.log"
        out = []
        for line in path.read_text().splitlines() if path.exists() else []:
            event, at, exp, replica, cpus = line.split()
            out.append((event, float(at), exp, replica, frozenset(int(c) for c in cpus.split(","))))
        return out


def project(tmp_path: Path, workers: int) -> Path:
    dest = tmp_path / f"project-{workers}"
    shutil.copytree(DATA, dest)
    spec = dest / "exp.yml"
    spec.write_text(spec.read_text().replace("n_workers: 0", f"n_workers: {workers}"))
    return dest


@pytest.fixture
def probe(tmp_path: Path) -> Probe:
    return Probe(tmp_path / "probe")


@pytest.fixture
def server(phalanx_home: Path) -> Iterator[Server]:
    s = start_server(phalanx_home, token=TOKEN, cpus=CORES, args=TRUSTING)
    try:
        yield s
        supervisors_gone(s)
    finally:
        stop_server(s.proc)


def test_a_server_killed_while_two_run_and_three_wait_loses_and_repeats_nothing(
    phalanx_home: Path, tmp_path: Path, probe: Probe
) -> None:
    folder = project(tmp_path, workers=0)  # one replica, one core: two fit at once
    go = probe.root / "go"
    params = {"probe": str(probe.root), "go": str(go), "points": 3}
    first = start_server(phalanx_home, token=TOKEN, cpus=CORES, args=TRUSTING)
    try:
        client = Client(first.url, TOKEN)
        ids = [client.submit(folder / "exp.yml", pack(folder), params, 0)["id"] for _ in range(5)]
        both = wait_for(
            "two running and three queued",
            lambda: (s := statuses(first)) and Counter(s.values()) == {"running": 2, "queued": 3} and s,
        )
        wait_for("both running replicas started", lambda: len(probe.runs()) == 2)
    finally:
        os.killpg(first.proc.pid, signal.SIGKILL)  # the server's whole process group, mid-flight
        first.proc.wait(timeout=30)
    second = start_server(phalanx_home, token=TOKEN, cpus=CORES, args=TRUSTING)
    try:
        assert statuses(second) == both  # what ran still runs, what waited still waits: true
        go.touch()
        ended = wait_for(
            "all five ended", lambda: (s := statuses(second)) and set(s.values()) <= set(ENDED) and s
        )
        assert ended == dict.fromkeys(ids, "succeeded")
        for exp_id in ids:
            loss = api(second, f"/experiments/{exp_id}/metrics/loss")["series"]
            assert {name: s["steps"] for name, s in loss.items()} == {"master": [0, 1, 2]}  # each once
            assert len(api(second, f"/experiments/{exp_id}/run")["attempts"]) == 1
        starts = Counter(exp for event, _, exp, _, _ in probe.runs() if event == "start")
        assert starts == dict.fromkeys(ids, 1)  # none started twice
        supervisors_gone(second)
    finally:
        stop_server(second.proc)


def test_two_clients_submit_ten_at_once_and_they_run_by_priority_on_their_own_cores(
    server: Server, tmp_path: Path, probe: Probe
) -> None:
    folder = project(tmp_path, workers=1)  # a master and a worker: one experiment fills the machine
    bundle = pack(folder)
    hold = probe.root / "go-blocker"
    (probe.root / "go").touch()  # the ten do not wait once they run
    client = Client(server.url, TOKEN)
    params = {"probe": str(probe.root), "points": 2}
    blocker = client.submit(folder / "exp.yml", bundle, {**params, "go": str(hold)}, 0)["id"]
    wait_for("the blocker running", lambda: statuses(server).get(blocker) == "running")

    rng = random.Random(24)
    priorities = [[rng.choice([-3, 0, 0, 2, 7]) for _ in range(5)] for _ in range(2)]
    submitted: dict[str, int] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def submit_all(mine: list[int]) -> None:
        try:
            barrier.wait(timeout=60)
            for p in mine:
                answer = Client(server.url, TOKEN).submit(
                    folder / "exp.yml", bundle, {**params, "go": str(probe.root / "go")}, p
                )
                submitted[answer["id"]] = p
        except BaseException as exc:
            errors.append(exc)

    clients = [threading.Thread(target=submit_all, args=(p,)) for p in priorities]
    for t in clients:
        t.start()
    for t in clients:
        t.join(timeout=300)
    assert not errors, errors
    assert len(submitted) == 10
    waiting = wait_for("all ten queued", lambda: len(q := api(server, "/queue")["queued"]) == 10 and q)
    order = [row["experiment_id"] for row in waiting]
    assert [submitted[i] for i in order] == sorted(submitted.values(), reverse=True)
    hold.touch()

    ended = wait_for(
        "all eleven ended",
        lambda: (s := statuses(server)) and len(s) == 11 and set(s.values()) <= set(ENDED) and s,
        600,
    )
    assert set(ended.values()) == {"succeeded"}
    started = {i: api(server, f"/experiments/{i}")["started_at"] for i in submitted}
    assert sorted(submitted, key=lambda i: started[i]) == order  # admitted in the queue's order

    # cores, read inside the replicas: an experiment's two replicas have one core each, never the
    # same, and no two replicas that ran at the same time shared a core
    runs = probe.runs()
    spans: dict[tuple[str, str], list[Any]] = {}
    for event, at, exp, replica, cpus in runs:
        span = spans.setdefault((exp, replica), [None, None, cpus])
        span[0 if event == "start" else 1] = at
    assert len(spans) == 22 and all(None not in s for s in spans.values())
    for (exp_a, rep_a), (start_a, end_a, cpus_a) in spans.items():
        assert len(cpus_a) == 1
        for (exp_b, rep_b), (start_b, end_b, cpus_b) in spans.items():
            if (exp_a, rep_a) != (exp_b, rep_b) and start_a < end_b and start_b < end_a:
                assert not cpus_a & cpus_b, f"{exp_a} {rep_a} and {exp_b} {rep_b} shared cores"

    # the code each ran is the bundle uploaded; the store was never locked
    for exp_id in submitted:
        assert api(server, f"/experiments/{exp_id}/submission")["bundle_sha256"] == digest(bundle)
    for path in server.home.rglob("*.log"):
        assert "database is locked" not in path.read_text(errors="replace"), path


def test_a_topology_that_never_fits_is_refused_and_a_queued_one_can_be_stopped(
    server: Server, tmp_path: Path, probe: Probe
) -> None:
    from phalanx.errors import UsageError

    client = Client(server.url, TOKEN)
    huge = project(tmp_path, workers=4)  # five one-core replicas on a two-core machine: never fits
    with pytest.raises(UsageError) as refused:
        client.submit(huge / "exp.yml", pack(huge), {"probe": str(probe.root)}, 0)
    # the words of the local refusal (`phalanx run` of the same file on the server's machine)
    assert re.search(r"needs 5 cores \(it has \d+\) on this machine", str(refused.value)), refused.value
    assert statuses(server) == {}  # nothing created

    folder = project(tmp_path, workers=1)
    hold = probe.root / "go"
    params = {"probe": str(probe.root), "go": str(hold)}
    first = client.submit(folder / "exp.yml", pack(folder), params, 0)["id"]
    second = client.submit(folder / "exp.yml", pack(folder), params, 0)["id"]
    # the launcher starts both at once: whichever supervisor reaches the queue second waits

    def one_running_one_queued() -> dict[str, str] | None:
        now = statuses(server)
        return now if sorted(now.values()) == ["queued", "running"] else None

    both = wait_for("one running, one queued", one_running_one_queued)
    (running,) = [e for e in (first, second) if both[e] == "running"]
    (waiting,) = [e for e in (first, second) if both[e] == "queued"]
    queue = api(server, "/queue")
    assert [r["experiment_id"] for r in queue["queued"]] == [waiting]
    stop = urllib.request.Request(f"{server.url}/api/v1/experiments/{waiting}/stop", method="POST")
    stop.add_header("Authorization", f"Bearer {TOKEN}")
    urllib.request.urlopen(stop, timeout=60).close()
    wait_for("the queued one stopped", lambda: statuses(server)[waiting] == "stopped")
    hold.touch()
    wait_for("the running one ended", lambda: statuses(server)[running] == "succeeded")
    assert {exp for _, _, exp, _, _ in probe.runs()} == {running}  # the stopped one never started
