"""Quotas and fair share with real `phalanx run` processes on a small view of this machine.

Every `phalanx` command here runs with a CPU affinity of two cores (one for the fair-share test), so
the machine looks the same whatever it really has. Each replica samples, from inside, whether
another experiment of its project runs beside it (a marker file per live replica, and the ledger's
holding entries), so overlap is observed, not inferred from timing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from phalanx.domain import ExperimentStatus

from .conftest import PHALANX, Phalanx, wait_for

CORES = sorted(os.sched_getaffinity(0))[:2]
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")

# argv: PROJECT SECONDS|gate. Appends "PROJECT ID" to starts.log, then samples for SECONDS (or until
# the release file appears, bounded by 500 s) whether another replica of PROJECT is live or holds cores in the
# ledger; any sighting is written to overlap-ID.
PROBE = """
import json, os, pathlib, sys, time
d = pathlib.Path(os.environ["PROBE_DIR"])
project, hold = sys.argv[1], sys.argv[2]
me = os.environ["PHALANX_EXPERIMENT_ID"]
with open(d / "starts.log", "a") as f:
    f.write(f"{project} {me}\\n")
live = d / f"live-{project}-{me}"
live.touch()
end = time.monotonic() + (500.0 if hold == "gate" else float(hold))
samples = 0
while True:
    others = sorted(p.name for p in d.glob(f"live-{project}-*") if p != live)
    try:
        entries = json.loads(pathlib.Path(os.environ["PROBE_LEDGER"]).read_text())["entries"]
    except (OSError, ValueError):
        entries = []
    holders = [e["experiment_id"] for e in entries if e.get("holding") and e.get("project") == project]
    if others or len(holders) > 1:
        (d / f"overlap-{me}").write_text(json.dumps({"others": others, "holders": holders}))
    samples += 1
    if time.monotonic() >= end or (hold == "gate" and (d / "release").exists()):
        break
    time.sleep(0.02)
(d / f"samples-{me}").write_text(str(samples))
live.unlink()
"""


class Machine:
    """`phalanx` commands on a small view of this machine, sharing one probe folder."""

    def __init__(self, phalanx: Phalanx, cores: list[int]) -> None:
        self.phalanx = phalanx
        self.cores = cores
        self.probe = phalanx.tmp / "probe"
        self.probe.mkdir(exist_ok=True)
        self.script = phalanx.tmp / "exp" / "probe.py"
        self.script.parent.mkdir(parents=True, exist_ok=True)
        self.script.write_text(PROBE)
        self.env = {
            **phalanx.env,
            "PROBE_DIR": str(self.probe),
            "PROBE_LEDGER": str(phalanx.home / "ledger.json"),
        }

    def spec(self, project: str, hold: str) -> Path:
        return self.phalanx.spec(
            f"""
            version: 1
            kind: experiment
            project: {project}
            framework: pytorch
            environment:
              resources:
                cpu: {{limits: 1}}
            run:
              cmd: python {self.script} {project} {hold}
            """,
            name=f"{project}-{hold}.yml",
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        cores = self.cores
        proc = subprocess.Popen(
            [*PHALANX, *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.phalanx.tmp,
            preexec_fn=lambda: os.sched_setaffinity(0, cores),
        )
        self.phalanx.started.append(proc)
        return proc

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        proc = self.start(*args)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def detach_all(self, specs: list[Path]) -> list[str]:
        """`phalanx run -f SPEC --detach` for every spec at once; the ids in the same order."""
        procs = [self.start("run", "-f", str(s), "--detach", "-o", "json") for s in specs]
        ids = []
        for proc in procs:
            out, err = proc.communicate(timeout=280)
            assert proc.returncode == 0, err
            ids.append(json.loads(out)["id"])
        return ids

    def experiments(self) -> dict[str, Any]:
        return {e.id: e for e in self.phalanx.store().list_experiments().items}

    def statuses(self) -> dict[str, ExperimentStatus]:
        try:
            return {i: e.status for i, e in self.experiments().items()}
        except Exception:  # the store is not created yet
            return {}

    def starts(self) -> list[str]:
        """Experiment ids in the order their replicas started (each appended one line)."""
        try:
            return [line.split()[1] for line in (self.probe / "starts.log").read_text().splitlines()]
        except OSError:
            return []

    def _supervisor_alive(self, experiment_id: str) -> bool:
        """Whether the experiment's supervisor (`python -m phalanx.runner <home>/runs/<id>`) still
        runs: found by its command line, as its pid file goes before it exits."""
        wanted = str(self.phalanx.home / "runs" / experiment_id).encode()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
                state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if b"phalanx.runner" in cmdline and wanted in cmdline.split(b"\0") and state != "Z":
                return True
        return False

    def wait_all_done(self, ids: list[str], timeout: float) -> None:
        wait_for(
            lambda: (
                all(s.done for i, s in self.statuses().items() if i in ids)
                and set(ids) <= set(self.statuses())
            ),
            timeout=timeout,
            what=f"{len(ids)} experiments ending",
        )
        # their supervisors leave too (they release the ledger and write the status just before)
        wait_for(lambda: not any(self._supervisor_alive(i) for i in ids), what="the supervisors exiting")
        exps = self.experiments()
        assert {exps[i].status for i in ids} == {ExperimentStatus.SUCCEEDED}, {
            i: (exps[i].status, exps[i].reason)
            for i in ids
            if exps[i].status is not ExperimentStatus.SUCCEEDED
        }


@pytest.mark.timeout(900)
def test_twelve_submissions_at_once_a_one_core_project_never_overlaps(phalanx: Phalanx) -> None:
    machine = Machine(phalanx, CORES)
    done = machine.run("quota", "set", "vision", "--cores", "1")
    assert done.returncode == 0, done.stderr
    vision, nlp = machine.spec("vision", "0.5"), machine.spec("nlp", "0.5")
    specs = [vision if i % 2 == 0 else nlp for i in range(12)]  # six of each, all at once
    ids = machine.detach_all(specs)
    projects = dict(zip(ids, ("vision" if s == vision else "nlp" for s in specs), strict=True))
    machine.wait_all_done(ids, timeout=700)
    assert sorted(machine.starts()) == sorted(ids)  # every replica ran once
    overlaps = {p.name: p.read_text() for p in machine.probe.glob("overlap-*")}
    vision_overlaps = {k: v for k, v in overlaps.items() if projects[k.removeprefix("overlap-")] == "vision"}
    assert vision_overlaps == {}
    # the probes did look: every vision replica sampled while it ran
    assert all(int((machine.probe / f"samples-{i}").read_text()) >= 1 for i in ids)
    assert json.loads((phalanx.home / "ledger.json").read_text())["entries"] == []


@pytest.mark.timeout(600)
def test_a_later_run_of_a_project_with_fewer_recent_core_seconds_starts_first(phalanx: Phalanx) -> None:
    machine = Machine(phalanx, CORES[:1])  # one core: every run waits for the one before it
    (first,) = machine.detach_all([machine.spec("vision", "gate")])
    wait_for(lambda: machine.starts() == [first], what="vision's first run holding the core")
    later_vision = machine.detach_all([machine.spec("vision", "0.1"), machine.spec("vision", "0.2")])
    (other,) = machine.detach_all([machine.spec("nlp", "0.1")])  # arrives last
    queue = json.loads(machine.run("queue", "-o", "json").stdout)
    order = [r["experiment_id"] for r in queue["queued"]]
    assert order[0] == other and sorted(order[1:]) == sorted(later_vision)  # those two came at once
    assert queue["queued"][1]["why"] == "waits for 1 core (0 free); behind 1 run of higher share"
    vision = next(p for p in queue["projects"] if p["project"] == "vision")
    assert vision["recent_core_seconds"] > 0 and vision["holds"]["cpus"] == 1
    (machine.probe / "release").touch()
    machine.wait_all_done([first, other, *later_vision], timeout=400)
    assert machine.starts()[:2] == [first, other]
