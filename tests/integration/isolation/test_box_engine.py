"""The local engine's box with real processes, without a server (a supervisor in this process):
its cgroup holds the replica to its memory and process-count limits and finds every process of it,
one that left its session and cleared its environment included, so a stop leaves nothing behind;
the tests' own leftover check finds boxed processes by their mark."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from tests.conftest import _processes_under

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Range, Resources
from phalanx.machine import box, identities
from phalanx.machine.box import Isolation
from phalanx.runner import LaunchOptions, Runner
from phalanx.spec.model import ExperimentSpec, ReplicaTemplate

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or bool(box.missing_tools()), reason="boxing needs root and bubblewrap"
    ),
    pytest.mark.timeout(600),
]

HOLD = """
setsid env -i /bin/sleep 601 &
/usr/bin/python3 -c "
import subprocess
held = []
try:
    for _ in range(60):
        held.append(subprocess.Popen(['/bin/sleep', '602']))
except OSError as exc:
    print('SPAWN STOPPED', len(held), exc.strerror)
"
echo READY
/bin/sleep 600
"""


def isolation(home: Path, pids_max: int = 4096) -> Isolation:
    account = identities.ensure_account("box-tests", None, home)
    return Isolation(
        account.name, account.uid, account.gid, "box-tests", "http://127.0.0.1:9", pids_max=pids_max
    )


def spec(command: str, memory: float | None = None) -> ExperimentSpec:
    resources = Resources(memory=Range(memory, memory)) if memory else Resources()
    return ExperimentSpec(
        version=1, kind="experiment", command=(command,), master=ReplicaTemplate(resources=resources)
    )


def test_a_boxed_replica_over_its_memory_limit_is_killed_by_its_cgroup(
    phalanx_home: Path, tmp_path: Path
) -> None:
    hog = 'python -c "b = bytearray(400 * 2**20); import time; time.sleep(30)"'
    options = LaunchOptions(workdir=tmp_path, isolation=isolation(phalanx_home))
    outcome = Runner().run(spec(hog, memory=128), options)
    assert outcome.status is ExperimentStatus.FAILED
    assert "memory limit 128Mi exceeded" in (outcome.reason or ""), outcome.reason


def test_a_stop_ends_every_process_of_the_box_even_one_that_hid_from_its_marks(
    phalanx_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "hold.sh").write_text(HOLD)
    exp_id = "b0c5d0e0f0a1"
    iso = isolation(phalanx_home, pids_max=40)
    outcomes: list[object] = []

    def launch() -> None:
        try:
            options = LaunchOptions(workdir=tmp_path, experiment_id=exp_id, isolation=iso)
            outcomes.append(Runner(Settings()).run(spec("/bin/sh hold.sh"), options, handle_signals=False))
        except BaseException as exc:  # said by the assertion below
            outcomes.append(exc)

    run = threading.Thread(target=launch)
    run.start()
    log = phalanx_home / "runs" / exp_id / "logs" / "master.log"
    deadline = time.monotonic() + 300
    while "READY" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and run.is_alive(), (
            outcomes,
            log.read_text() if log.exists() else "",
        )
        time.sleep(0.2)
    unit = json.loads((phalanx_home / "runs" / exp_id / "attempts" / "0" / "state.json").read_text())[
        "units"
    ][0]
    in_cgroup = {
        int(p) for folder in unit["cgroup"] for p in Path(folder, "cgroup.procs").read_text().split()
    }
    hidden = [pid for pid in in_cgroup if _cmdline(pid) == "/bin/sleep 601"]
    assert hidden, "the process that left its session is not in the replica's cgroup"
    assert b"PHALANX" not in Path(f"/proc/{hidden[0]}/environ").read_bytes()  # no mark at all
    assert len([p for p in in_cgroup if _cmdline(p) == "/bin/sleep 602"]) < 40  # pids.max held it
    assert "SPAWN STOPPED" in log.read_text()
    marked = {pid for pid, _ in _processes_under(phalanx_home)}
    assert marked & in_cgroup, "the tests' leftover check does not see the boxed replica"
    (phalanx_home / "runs" / exp_id / "stop").touch()
    run.join(timeout=120)
    assert outcomes and getattr(outcomes[0], "status", outcomes[0]) is ExperimentStatus.STOPPED, outcomes
    assert not [p for p in in_cgroup if _cmdline(p)], "a process of the box outlived its stop"
    assert not any(Path(folder).exists() for folder in unit["cgroup"])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
