"""Sharing this machine: real `phalanx run` processes queue for cores through the ledger.

Every `phalanx run` here is started with a CPU affinity of two cores, so the machine looks like the
2-core VM the issue describes whatever it really has. Replicas hold on until the test creates a
"release" file, so what is running or queued at each moment is decided by the test, not by timing.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import Done, phalanx_cli

from phalanx.domain import ExperimentStatus

from .conftest import PHALANX, Phalanx, wait_for

CORES = sorted(os.sched_getaffinity(0))[:2]
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")

# Each replica records its allowed CPU list (atomically: a test may glob it at any moment) and waits
# (bounded) for the release file.
HOLD = (
    'python -c "import os, pathlib, time; '
    "d = pathlib.Path(os.environ['PROBE_DIR']); "
    "cpus = open('/proc/self/status').read().split('Cpus_allowed_list:')[1].split()[0]; "
    "p = d / (os.environ['PHALANX_EXPERIMENT_ID'] + '-' + os.environ['PHALANX_REPLICA']); "
    "t = d / (p.name + '.tmp'); t.write_text(cpus); os.replace(t, p); "  # seen whole, never half-written
    "end = time.time() + 120; "
    "exec('while not (d / \\'release\\').exists() and time.time() < end: time.sleep(0.05)')\""
)


def spec_for(phalanx: Phalanx, cores_each: int, workers: int = 0, name: str = "q") -> Path:
    replicas = ""
    if workers:
        replicas = f"""
          replicas:
            n_workers: {workers}
            default_worker:
              resources:
                cpu: {{limits: {cores_each}}}"""
    return phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          resources:
            cpu: {{limits: {cores_each}}}{replicas}
        run:
          cmd: {json.dumps(HOLD)}
        """,
        name=f"{name}.yml",
    )


class Machine:
    """`phalanx` commands on a two-core view of this machine, sharing one probe folder."""

    def __init__(self, phalanx: Phalanx) -> None:
        self.phalanx = phalanx
        self.probe = phalanx.tmp / "probe"
        self.probe.mkdir(exist_ok=True)
        self.env = {**phalanx.env, "PROBE_DIR": str(self.probe)}

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [*PHALANX, *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.phalanx.tmp,
            preexec_fn=lambda: os.sched_setaffinity(0, CORES),  # the test's threads: none
        )
        self.phalanx.started.append(proc)
        return proc

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = self.start(*args)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def cli(self, *args: str) -> Done:
        """`phalanx ARGS` in this process (tests/support/cli.py: a command that reads, refuses or
        stops), on the same two-core view: the calling thread's CPU affinity (what the commands
        read) is the two cores for the call."""
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, CORES)
        try:
            unset: dict[str, str | None] = {k: None for k in os.environ if k not in self.env}
            return phalanx_cli(*args, env={**unset, **self.env}, cwd=self.phalanx.tmp)
        finally:
            os.sched_setaffinity(0, before)

    def release(self) -> None:
        (self.probe / "release").touch()

    def cpus(self, experiment_id: str, replica: str) -> set[int]:
        text = (self.probe / f"{experiment_id}-{replica}").read_text()
        out: set[int] = set()
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
        return out

    def experiments(self) -> dict[str, Any]:
        return {e.id: e for e in self.phalanx.store().list_experiments().items}

    def statuses(self) -> dict[str, ExperimentStatus]:
        try:
            return {i: e.status for i, e in self.experiments().items()}
        except Exception:  # the store is not created yet
            return {}

    def one_running_one_queued(self) -> tuple[str, str]:
        """Wait (bounded) until exactly one experiment runs and one waits; their ids."""
        both = wait_for(
            lambda: (
                (s := self.statuses())
                and len(_with(s, ExperimentStatus.RUNNING)) == 1
                and len(_with(s, ExperimentStatus.QUEUED)) == 1
                and s
            ),
            what="one experiment running and one queued",
        )
        (running,) = _with(both, ExperimentStatus.RUNNING)
        (queued,) = _with(both, ExperimentStatus.QUEUED)
        return running, queued

    def ledger(self) -> list[dict[str, Any]]:
        """The ledger's entries, read without taking its lock (so the test reclaims nothing)."""
        try:
            return list(json.loads((self.phalanx.home / "ledger.json").read_text())["entries"])
        except (OSError, ValueError):
            return []


@pytest.fixture
def machine(phalanx: Phalanx) -> Machine:
    return Machine(phalanx)


def _with(statuses: dict[str, ExperimentStatus], status: ExperimentStatus) -> list[str]:
    return [i for i, s in statuses.items() if s is status]


def test_two_experiments_that_each_need_both_cores_run_one_after_the_other(machine: Machine) -> None:
    spec = spec_for(machine.phalanx, 1, workers=1)  # master + worker, 1 core each: 2 cores
    first = machine.start("run", "-f", str(spec))
    second = machine.start("run", "-f", str(spec))
    running, queued = machine.one_running_one_queued()
    wait_for(lambda: (machine.probe / f"{running}-worker-0").exists(), what="the first's replicas")
    doc = json.loads(machine.cli("queue", "-o", "json").stdout)
    assert [r["experiment_id"] for r in doc["running"]] == [running]
    waiting = [(r["experiment_id"], r["position"], r["needs"]["cpus"]) for r in doc["queued"]]
    assert waiting == [(queued, 1, 2)]
    shown = machine.run("get", queued).stdout  # a real `phalanx get` (its smoke in this folder)
    assert "status:    queued" in shown and "position 1 of 1, priority 0, needs 2 cores" in shown
    assert not list(machine.probe.glob(f"{queued}-*"))  # nothing of the second started
    machine.release()
    errs = []
    for proc in (first, second):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        errs.append(err)
    assert any(f"queued (position 1 of 1): waiting for 2 cores; running now: {running}" in e for e in errs)
    exps = machine.experiments()
    assert exps[queued].started_at >= exps[running].finished_at
    for exp in (running, queued):  # inside each experiment the replicas' cores are disjoint
        master, worker = machine.cpus(exp, "master"), machine.cpus(exp, "worker-0")
        assert len(master) == 1 and len(worker) == 1 and not master & worker
    assert machine.ledger() == []


def test_two_experiments_side_by_side_get_different_cores(machine: Machine) -> None:
    spec = spec_for(machine.phalanx, 1)
    procs = [machine.start("run", "-f", str(spec)) for _ in range(2)]
    wait_for(lambda: len(list(machine.probe.glob("*-master"))) == 2, what="both experiments running")
    ids = [p.name.removesuffix("-master") for p in machine.probe.glob("*-master")]
    a, b = (machine.cpus(i, "master") for i in ids)
    assert len(a) == 1 and len(b) == 1 and not a & b  # not both pinned to core 0
    machine.release()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err


def test_twelve_detached_experiments_all_run_in_priority_order(machine: Machine) -> None:
    blocker_spec = spec_for(machine.phalanx, 2, name="blocker")
    blocker = machine.start("run", "-f", str(blocker_spec))
    wait_for(lambda: list(machine.probe.glob("*-master")), what="the blocker running")
    trivial = machine.phalanx.spec(
        """
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          resources:
            cpu: {limits: 2}
        run:
          cmd: echo done
        """,
        name="trivial.yml",
    )
    priorities = [0, 5, 1, 5, 0, 3, 2, 1, 3, 0, 2, 4]
    launchers = [
        machine.start("run", "-f", str(trivial), "--detach", "--priority", str(p), "-o", "json")
        for p in priorities
    ]
    ids = {}
    for proc, priority in zip(launchers, priorities, strict=True):
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        ids[json.loads(out)["id"]] = priority
    # every launcher returned while the blocker still holds both cores (it waits for release()):
    # submitting is not serialized behind it; no wall bound on 24 processes started at once
    # (communicate's 180 s catches a hang)
    assert blocker.poll() is None
    statuses = machine.statuses()
    assert all(statuses[i] is ExperimentStatus.QUEUED for i in ids), statuses
    doc = json.loads(machine.cli("queue", "-o", "json").stdout)
    assert [ids[r["experiment_id"]] for r in doc["queued"]] == sorted(priorities, reverse=True)
    machine.release()
    blocker.communicate(timeout=120)
    wait_for(
        lambda: all(s.done for i, s in machine.statuses().items() if i in ids),
        timeout=240,
        what="the twelve experiments ending",
    )
    exps = machine.experiments()
    assert {exps[i].status for i in ids} == {ExperimentStatus.SUCCEEDED}, {
        i: (exps[i].status, exps[i].reason) for i in ids
    }
    order = sorted(ids, key=lambda i: exps[i].started_at)
    assert [ids[i] for i in order] == sorted(priorities, reverse=True)
    for a, b in itertools.pairwise(order):  # one at a time: each needs both cores
        assert exps[b].started_at >= exps[a].finished_at
    logs = "".join((machine.phalanx.home / "runs" / i / "supervisor.log").read_text() for i in ids)
    assert "database is locked" not in logs and "Address already in use" not in logs
    # each supervisor frees its cores on its way out, a moment after its status is final (under
    # load the last one was seen holding them still): wait for that, then nothing is held
    wait_for(lambda: machine.ledger() == [], timeout=120, what="the ledger's last entry freed")


def test_a_killed_supervisor_frees_its_cores_within_five_seconds(machine: Machine) -> None:
    spec = spec_for(machine.phalanx, 2)
    holder = machine.start("run", "-f", str(spec))
    wait_for(lambda: list(machine.probe.glob("*-master")), what="the first experiment running")
    waiter = machine.start("run", "-f", str(spec))
    (waiting,) = wait_for(
        lambda: _with(machine.statuses(), ExperimentStatus.QUEUED), what="the second queued"
    )
    killed_at = time.time()  # wall clock, as the ledger's own `since`
    holder.send_signal(signal.SIGKILL)
    (admitted,) = wait_for(
        lambda: [e for e in machine.ledger() if e["experiment_id"] == waiting and e["holding"]],
        timeout=30,
        what="the waiting experiment admitted after the holder was killed",
    )
    # the product's latency: the waiter stamps `since` when it admits (under the ledger's lock),
    # so a slow test process polling the ledger does not count
    assert admitted["since"] - killed_at < 5, admitted["since"] - killed_at
    wait_for(lambda: (machine.probe / f"{waiting}-master").exists(), what="the second's replica")
    assert machine.cpus(waiting, "master") == set(CORES)
    machine.release()
    waiter.communicate(timeout=120)
    assert waiter.returncode == 0


def test_a_killed_waiting_run_leaves_no_entry_and_no_queued_experiment(machine: Machine) -> None:
    spec = spec_for(machine.phalanx, 2)
    holder = machine.start("run", "-f", str(spec))
    wait_for(lambda: list(machine.probe.glob("*-master")), what="the first experiment running")
    waiter = machine.start("run", "-f", str(spec))
    (waiting,) = wait_for(
        lambda: _with(machine.statuses(), ExperimentStatus.QUEUED), what="the second queued"
    )
    waiter.send_signal(signal.SIGKILL)
    waiter.communicate(timeout=30)
    doc = json.loads(machine.cli("queue", "-o", "json").stdout)
    assert doc["queued"] == []
    assert all(e["experiment_id"] != waiting for e in machine.ledger())
    got = json.loads(machine.cli("get", waiting, "-o", "json").stdout)
    assert got["status"] == "stopped" and "queued" in got["reason"]
    machine.release()
    holder.communicate(timeout=120)
    assert machine.ledger() == []


@pytest.mark.parametrize("how", ["phalanx stop", "ctrl-c", "api"])
def test_stopping_a_queued_experiment_takes_it_out_of_the_queue(machine: Machine, how: str) -> None:
    spec = spec_for(machine.phalanx, 2)
    holder = machine.start("run", "-f", str(spec))
    wait_for(lambda: list(machine.probe.glob("*-master")), what="the first experiment running")
    waiter = machine.start("run", "-f", str(spec))
    (waiting,) = wait_for(
        lambda: _with(machine.statuses(), ExperimentStatus.QUEUED), what="the second queued"
    )
    if how == "phalanx stop":
        stopped = machine.cli("stop", waiting)
        assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    elif how == "ctrl-c":
        waiter.send_signal(signal.SIGINT)
    else:  # the server's app in this process (a real `phalanx server` is tests/integration/server's)
        from fastapi.testclient import TestClient

        from phalanx.config import Settings
        from phalanx.server.app import create_app
        from phalanx.server.settings import ServerSettings

        server = ServerSettings(store=Settings(home=machine.phalanx.home))
        app = create_app(server, machine.phalanx.store())
        with TestClient(app, base_url="http://127.0.0.1:8000") as api:
            shown = api.get("/api/v1/experiments?status=queued").json()["items"]
            assert [e["id"] for e in shown] == [waiting] and shown[0]["status"] == "queued"
            assert api.post(f"/api/v1/experiments/{waiting}/stop").json()["stop_requested"]
            waiter.wait(timeout=60)
    _, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 130, err
    exp = machine.experiments()[waiting]
    assert exp.status is ExperimentStatus.STOPPED and exp.started_at is None
    # it never ran: not "stopped by SIGTERM"
    assert exp.reason == (
        "stopped while queued (by SIGINT)" if how == "ctrl-c" else "stopped while queued (by a stop request)"
    )
    assert all(e["experiment_id"] != waiting for e in machine.ledger())
    assert not list(machine.probe.glob(f"{waiting}-*"))
    machine.release()
    holder.communicate(timeout=120)


def test_no_wait_refuses_and_names_what_is_busy(machine: Machine) -> None:
    spec = spec_for(machine.phalanx, 2)
    holder = machine.start("run", "-f", str(spec))
    (running,) = wait_for(
        lambda: _with(machine.statuses(), ExperimentStatus.RUNNING), what="the first running"
    )
    refused = machine.cli("run", "-f", str(spec), "--no-wait")  # refused: in this process
    assert refused.returncode == 2
    assert running in refused.stderr and "2 cores" in refused.stderr and "Traceback" not in refused.stderr
    assert "needs 2 cores (cores from the cpu limits)" in refused.stderr  # names what it counted
    detached = machine.run("run", "-f", str(spec), "--no-wait", "--detach")  # a real `phalanx run`
    assert detached.returncode == 2 and running in detached.stderr
    assert list(machine.statuses()) == [running]  # nothing recorded for the refused ones
    machine.release()
    holder.communicate(timeout=120)


def test_two_experiments_asking_one_gpu_each_on_a_one_gpu_machine_take_turns(machine: Machine) -> None:
    from phalanx.machine.limits import detect_gpus

    gpus = detect_gpus()
    if not gpus:
        pytest.skip("needs a CUDA GPU (nvidia-smi)")
    machine.env["CUDA_VISIBLE_DEVICES"] = gpus[0]  # a one-GPU machine, whatever this one has
    show = HOLD.replace("cpus = open", "cpus = os.environ['CUDA_VISIBLE_DEVICES'] or open")
    spec = machine.phalanx.spec(
        f"""
        version: 1
        kind: experiment
        environment:
          resources:
            gpu: {{requests: 1, limits: 1}}
        run:
          cmd: {json.dumps(show)}
        """,
        name="gpu.yml",
    )
    first = machine.start("run", "-f", str(spec))
    second = machine.start("run", "-f", str(spec))
    running, queued = machine.one_running_one_queued()
    wait_for(lambda: (machine.probe / f"{running}-master").exists(), what="the first's replica")
    assert (machine.probe / f"{running}-master").read_text() == gpus[0]
    assert not list(machine.probe.glob(f"{queued}-*"))
    machine.release()
    for proc in (first, second):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    exps = machine.experiments()
    assert exps[queued].started_at >= exps[running].finished_at
    assert (machine.probe / f"{queued}-master").read_text() == gpus[0]
