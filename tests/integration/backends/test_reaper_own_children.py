"""The reaper collects the orphans reparented to it, never its own replica processes: a replica
process reaped outside its Popen loses its status, and Popen then reports 0 (ECHILD), so a killed
replica would be recorded as succeeded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# runs in a process of its own: waitid(P_ALL) in the test process would reap other tests' children
SCENARIO = """
import os, signal, subprocess, sys
from phalanx.backends.local.reaper import Reaper

reaper = Reaper({"processes": []})
killed = subprocess.Popen(["sleep", "60"])
reaper.procs.append(killed)
os.kill(killed.pid, signal.SIGKILL)
os.waitid(os.P_PID, killed.pid, os.WEXITED | os.WNOWAIT)  # a zombie now, not yet collected

looks = []  # its Popen cannot collect it at the first look (as when its wait lock is held)
real_poll = killed.poll
killed.poll = lambda: looks.append(1) if not looks else real_poll()
reaper.reap_orphans()
print(killed.poll())
"""


def test_a_killed_replica_process_keeps_its_signal_even_when_its_popen_cannot_collect_it_at_once(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "-9", "the reaper collected its own child: the SIGKILL became exit 0"
