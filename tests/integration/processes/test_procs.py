"""phalanx.machine.procs.pid_alive: what a stop, the reaper and reconcile trust to tell a live process."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
from typing import Any

import pytest

from phalanx.machine.procs import pid_alive


def test_a_running_process_is_alive_and_a_zombie_or_a_reaped_one_is_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid)
    finally:
        child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped: a zombie
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)


def test_a_process_reaped_between_the_signal_and_the_proc_read_is_not_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kill(pid, 0) succeeded on the zombie, then its parent reaped it before /proc/<pid>/stat was
    read: gone, not 'alive' (a stop would otherwise wait for a process that no longer exists)."""
    real_open = builtins.open

    def reaped_meanwhile(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path) == f"/proc/{os.getpid()}/stat":
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", reaped_meanwhile)
    assert not pid_alive(os.getpid())
