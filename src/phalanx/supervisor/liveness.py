"""The liveness check: a replica that makes no progress for ``hang_timeout`` seconds fails the experiment.

Without it a replica that hangs (SIGSTOPped, deadlocked, a worker that stopped calling all_reduce)
is found only by gloo's 30-minute timeout, and the error then blames whichever peer timed out first
(often the master). Progress is any of: a console line, CPU time used by the replica's processes.
Set with ``PHALANX_HANG_TIMEOUT`` (seconds; unset or 0: off, the default, since a replica may
legitimately sit idle, e.g. waiting for data).

The replica named is the one that stalled, not its peers: a stopped one (SIGSTOP, state T) if any,
else the one whose last progress is the oldest. Peers blocked waiting for it stall later, so they
are not blamed. Only engines that give replica pids on this machine (local) are watched for CPU;
elsewhere console output alone counts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from phalanx import limits

CHECK_SECONDS = 1.0  # how often the process tree is read


def hang_timeout_from_env() -> float | None:
    try:
        value = float(os.environ.get("PHALANX_HANG_TIMEOUT", "0") or 0)
    except ValueError:
        return None
    return value if value > 0 else None


def _cpu_and_stopped(pids: list[int]) -> tuple[int, bool]:
    """CPU ticks used by these processes together, and whether one of them is stopped (T)."""
    ticks, stopped = 0, False
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        stopped = stopped or fields[0] in ("T", "t")
        ticks += int(fields[11]) + int(fields[12])
    return ticks, stopped


@dataclass
class Liveness:
    timeout: float
    last_progress: dict[str, float] = field(default_factory=dict)
    _cpu: dict[str, int] = field(default_factory=dict)
    _stopped: dict[str, bool] = field(default_factory=dict)
    _checked: float = 0.0

    def output(self, replica: str) -> None:
        """A console line of ``replica`` arrived (called from its tail thread)."""
        self.last_progress[replica] = time.monotonic()

    def check(self, running: Mapping[str, int | None]) -> str | None:
        """``running``: replica -> leader pid (None if unknown) of replicas still running. The reason
        to fail the experiment when one has stalled for longer than the timeout, else None."""
        now = time.monotonic()
        if now - self._checked < CHECK_SECONDS:
            return None
        self._checked = now
        tree = limits.children_map()
        for name, pid in running.items():
            self.last_progress.setdefault(name, now)
            if pid is None:
                continue
            ticks, stopped = _cpu_and_stopped([pid, *limits.descendants(pid, tree)])
            self._stopped[name] = stopped
            if ticks != self._cpu.get(name):
                self._cpu[name] = ticks
                self.last_progress[name] = now
        stalled = {
            n: now - self.last_progress[n] for n in running if now - self.last_progress[n] > self.timeout
        }
        if not stalled:
            return None
        frozen = [n for n in stalled if self._stopped.get(n)]
        culprit = frozen[0] if frozen else max(stalled, key=lambda n: stalled[n])
        how = "is stopped (SIGSTOP?) and " if self._stopped.get(culprit) else ""
        return (
            f"{culprit} {how}made no progress (no output, no CPU time) for {stalled[culprit]:.0f} s "
            f"(hang_timeout {self.timeout:g} s)"
        )
