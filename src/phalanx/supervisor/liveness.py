"""The liveness check: a replica that makes no progress for ``hang_timeout`` seconds fails the experiment.

Without it a replica that hangs (SIGSTOPped, deadlocked, a worker that stopped calling all_reduce)
is found only by gloo's 30-minute timeout, and the error then blames whichever peer timed out first
(often the master). Progress is any of: a console line, CPU time used by the replica's processes
(at least a tenth of a core: a rank blocked in all_reduce still uses a tick now and then).
Set with ``PHALANX_HANG_TIMEOUT`` (seconds; unset or 0: off, the default, since a replica may
legitimately sit idle, e.g. waiting for data).

A hang is declared when a stopped replica (SIGSTOP, state T) has made no progress for that long, or
when every running replica has made none (a replica idle while a peer works is waiting for it). The
replica named is the stopped one; else the one behind in the steps the replicas report (in a
synchronous job the ranks that reached a later step wait in a collective for the one that did not:
idle time alone misleads, since the master waiting in all_reduce may well have gone idle first);
else the one idle longest. The other idle ones are listed as likely waiting for it. Only engines
that give replica pids on this machine (local) are watched for CPU; elsewhere console output alone
counts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from phalanx import knobs
from phalanx.machine import limits

CHECK_SECONDS = 1.0  # how often the process tree is read
BUSY_FRACTION = 0.1  # CPU use (of one core) that counts as progress; a blocked rank uses about 0.01
TICKS = os.sysconf("SC_CLK_TCK")


def hang_timeout_from_env() -> float | None:
    """PHALANX_HANG_TIMEOUT in seconds, None when off (`phalanx run` refused a malformed one)."""
    value = knobs.HANG_TIMEOUT.value()
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


def _behind(stalled: Mapping[str, float], steps: Callable[[], Mapping[str, int]] | None) -> str | None:
    """The one stalled replica whose last reported step is behind every other's (None: no such one,
    or nothing reported)."""
    if steps is None:
        return None
    try:
        known = {n: s for n, s in steps().items() if n in stalled}
    except Exception:  # the store may be unreachable: idle time decides then
        return None
    if len(known) < 2:
        return None
    lowest = min(known.values())
    behind = [n for n, s in known.items() if s == lowest]
    return behind[0] if len(behind) == 1 else None


@dataclass
class Liveness:
    timeout: float
    last_progress: dict[str, float] = field(default_factory=dict)
    _cpu: dict[str, int] = field(default_factory=dict)
    _stopped: dict[str, bool] = field(default_factory=dict)
    _cpu_at: dict[str, float] = field(default_factory=dict)
    _checked: float = 0.0

    def output(self, replica: str) -> None:
        """A console line of ``replica`` arrived (called from its tail thread)."""
        self.last_progress[replica] = time.monotonic()

    def check(
        self, running: Mapping[str, int | None], steps: Callable[[], Mapping[str, int]] | None = None
    ) -> str | None:
        """``running``: replica -> leader pid (None if unknown) of replicas still running;
        ``steps``: replica -> last step it reported (asked only once a hang is declared). The reason
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
            before, since = self._cpu.get(name), self._cpu_at.get(name)
            self._cpu[name], self._cpu_at[name] = ticks, now
            if before is None or since is None:
                continue
            # progress is real work: a process blocked in all_reduce still uses a tick now and then
            # (gloo's threads); counting those would hide every hang
            if (ticks - before) / TICKS / max(now - since, 1e-3) >= BUSY_FRACTION:
                self.last_progress[name] = now
        idle = {n: now - self.last_progress[n] for n in running}
        stalled = {n: t for n, t in idle.items() if t > self.timeout}
        frozen = [n for n in stalled if self._stopped.get(n)]
        if not frozen and (not stalled or len(stalled) < len(idle)):
            return None  # an idle replica while a peer works is waiting for it, not hung
        culprit = frozen[0] if frozen else _behind(stalled, steps) or max(stalled, key=lambda n: stalled[n])
        how = "is stopped (SIGSTOP?) and " if culprit in frozen else ""
        others = sorted(n for n in stalled if n != culprit)
        also = f"; also idle, likely waiting for it: {', '.join(others)}" if others else ""
        return (
            f"{culprit} {how}made no progress (no output, no CPU time) for {stalled[culprit]:.0f} s "
            f"(hang_timeout {self.timeout:g} s){also}"
        )
