"""The stall watchdog: a replica that makes no progress is named after ``notice`` seconds and fails
the experiment after ``fail`` seconds, on by default (10 and 30 minutes).

Without it a replica that hangs (SIGSTOPped, deadlocked, a worker that stopped calling all_reduce,
a TensorFlow worker whose only inter-op thread waits on itself) holds its cores until someone looks,
or until gloo's 30-minute timeout blames whichever peer timed out first (often the master).
Progress is any of: a step the replica reported (read from the store every STEPS_SECONDS while it
is otherwise idle), a console line, CPU time used by its processes (at least a tenth of a core: a
rank blocked in all_reduce still uses a tick now and then).

The times: the file's ``run.stall_notice`` / ``run.hang_timeout``, else ``PHALANX_STALL_NOTICE`` /
``PHALANX_HANG_TIMEOUT`` where the supervisor runs (the environment `phalanx server` was started
with is its experiments' default), else 600 and 1800 seconds; 0 turns one off. A replica whose CPU
this machine cannot see (a Slurm or Kubernetes replica) is judged by its steps and output only, and
only when a time was set explicitly (file or variable): minutes without output are normal for a
cluster job, and the defaults must never fail one for that.

A stall is declared when a stopped replica (SIGSTOP, state T) has made no progress for that long,
or when every running replica has made none (a replica idle while a peer works is waiting for it).
The replica named is the stopped one; else the one behind in the steps the replicas report (in a
synchronous job the ranks that reached a later step wait in a collective for the one that did not:
idle time alone misleads, since the master waiting in all_reduce may well have gone idle first);
else the one idle longest. The other idle ones are listed as likely waiting for it.

The notice becomes the running experiment's reason (`phalanx get`, `phalanx ls`, the web UI), a
line on the supervisor's console and an alert (phalanx.alerts); it is taken back when the replicas
make progress again. The failure's reason names the replica and what it was doing: its last
console lines and, where py-spy can read it, the stack of each of its Python processes.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from phalanx import knobs
from phalanx.machine import proctree
from phalanx.spec.model import Stall
from phalanx.store.notice_kinds import STALLED
from phalanx.supervisor.notices import Notices, alert

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0  # how often the process tree is read
BUSY_FRACTION = 0.1  # CPU use (of one core) that counts as progress; a blocked rank uses about 0.01
STEPS_SECONDS = 30.0  # how often reported steps are read while a replica is otherwise idle
STACK_SECONDS = 20.0  # how long one py-spy dump may take
STACK_LINES = 40  # of each process's stack, in the reason
STACK_PROCESSES = 3  # Python processes of the replica whose stacks are dumped
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class StallTimes:
    """When a stalled replica is named (``notice``) and fails the experiment (``fail``), seconds;
    None: off. ``unseen_cpu``: judge replicas whose CPU cannot be seen (set explicitly only)."""

    notice: float | None
    fail: float | None
    unseen_cpu: bool

    @classmethod
    def of(cls, stall: Stall) -> StallTimes:
        """The file's times, else the variables', else the defaults (knobs)."""
        notice = stall.notice if stall.notice is not None else knobs.STALL_NOTICE.value()
        fail = stall.fail if stall.fail is not None else knobs.HANG_TIMEOUT.value()
        explicit = (
            stall.notice is not None
            or stall.fail is not None
            or knobs.STALL_NOTICE.is_set()
            or knobs.HANG_TIMEOUT.is_set()
        )
        return cls(notice or None, fail or None, explicit)


class StallNotices:
    """Where a stall is said (``notices``): the experiment's reason while it runs (`phalanx get`,
    the UI), the supervisor's console and the alert hooks."""

    def __init__(self, notices: Notices) -> None:
        self.notices = notices
        self.experiment_id = notices.experiment_id

    def noticed(self, replica: str, text: str) -> None:
        self.notices.tell(STALLED, replica, text)  # its text is the reason while it lasts

    def cleared(self) -> None:
        self._reason("")
        self.notices.say("the stalled replicas make progress again")

    def withdrawn(self) -> None:
        """The attempt ended with a notice up: the reason is taken back (its outcome says the rest)."""
        self._reason("")

    def hung(self, replica: str, reason: str) -> None:
        alert("hung", self.experiment_id, replica, reason)

    def _reason(self, text: str) -> None:
        store = self.notices.store()
        if store is None:
            return
        try:
            store.update_experiment(self.experiment_id, reason=text)
        except Exception as exc:  # the store may be down: supervision goes on, the next poll retries
            log.warning("could not record the stall notice: %s", exc)


def watchdog(
    stall: Stall,
    notices: StallNotices | None = None,
    last_lines: Callable[[str], Sequence[str]] | None = None,
) -> Liveness | None:
    """The experiment's watchdog (None: both times off)."""
    times = StallTimes.of(stall)
    if times.notice is None and times.fail is None:
        return None
    return Liveness(
        timeout=times.fail,
        notice=times.notice,
        unseen_cpu=times.unseen_cpu,
        notices=notices,
        last_lines=last_lines,
    )


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


def _behind(stalled: Mapping[str, float], steps: Mapping[str, int]) -> str | None:
    """The one stalled replica whose last reported step is behind every other's (None: no such one,
    or nothing reported)."""
    known = {n: s for n, s in steps.items() if n in stalled}
    if len(known) < 2:
        return None
    lowest = min(known.values())
    behind = [n for n, s in known.items() if s == lowest]
    return behind[0] if len(behind) == 1 else None


@dataclass
class Liveness:
    """One experiment's watchdog, fed by the supervisor's poll (``check``) and its log tails
    (``output``); ``close`` after each attempt. ``timeout``: the fail time; ``notice``: the
    notice time (None: off)."""

    timeout: float | None
    notice: float | None = None
    unseen_cpu: bool = True
    notices: StallNotices | None = None
    last_lines: Callable[[str], Sequence[str]] | None = None
    last_progress: dict[str, float] = field(default_factory=dict)
    _cpu: dict[str, int] = field(default_factory=dict)
    _stopped: dict[str, bool] = field(default_factory=dict)
    _cpu_at: dict[str, float] = field(default_factory=dict)
    _pids: dict[str, int | None] = field(default_factory=dict)
    _steps: dict[str, int] = field(default_factory=dict)
    _steps_at: float = float("-inf")
    _noticed: str | None = None
    _checked: float = 0.0

    def output(self, replica: str) -> None:
        """A console line of ``replica`` arrived (called from its tail thread)."""
        self.last_progress[replica] = time.monotonic()

    def close(self) -> None:
        """The attempt has ended: a notice is taken back, and the next attempt starts afresh."""
        if self._noticed is not None and self.notices is not None:
            self.notices.withdrawn()
        self._noticed = None
        for state in (self.last_progress, self._cpu, self._stopped, self._cpu_at, self._pids, self._steps):
            state.clear()
        self._steps_at = float("-inf")

    def check(
        self, running: Mapping[str, int | None], steps: Callable[[], Mapping[str, int]] | None = None
    ) -> str | None:
        """``running``: replica -> leader pid (None if unknown) of replicas still running;
        ``steps``: replica -> last step it reported (read only while a replica is otherwise idle).
        Says a stall notice (``notices``); returns the reason to fail the experiment once one has
        stalled for longer than the fail time, else None."""
        now = time.monotonic()
        if now - self._checked < CHECK_SECONDS:
            return None
        self._checked = now
        times = [t for t in (self.notice, self.timeout) if t is not None]
        if not times:
            return None
        self._watch_cpu(running, now)
        idle = {n: now - self.last_progress[n] for n in running}
        shortest = min(times)
        if steps is not None and idle and max(idle.values()) > shortest / 2:
            self._watch_steps(steps, now, min(STEPS_SECONDS, shortest / 4))
            idle = {n: now - self.last_progress[n] for n in running}
        if self.timeout is not None:
            hung = self._declared(idle, self.timeout)
            if hung is not None:
                culprit, stalled = hung
                reason = self._what(culprit, stalled, f"hang_timeout {self.timeout:g} s")
                reason += self._doing(culprit)
                if self.notices is not None:
                    self.notices.hung(culprit, reason)
                return reason
        if self.notice is not None:
            self._say_notice(self._declared(idle, self.notice))
        return None

    def _watch_cpu(self, running: Mapping[str, int | None], now: float) -> None:
        tree = proctree.children_map()
        for name, pid in running.items():
            self.last_progress.setdefault(name, now)
            self._pids[name] = pid
            if pid is None:
                if not self.unseen_cpu:  # its CPU cannot be seen: never judged by the defaults
                    self.last_progress[name] = now
                continue
            ticks, stopped = _cpu_and_stopped([pid, *proctree.descendants(pid, tree)])
            self._stopped[name] = stopped
            before, since = self._cpu.get(name), self._cpu_at.get(name)
            self._cpu[name], self._cpu_at[name] = ticks, now
            if before is None or since is None:
                continue
            # progress is real work: a process blocked in all_reduce still uses a tick now and then
            # (gloo's threads); counting those would hide every hang
            if (ticks - before) / TICKS / max(now - since, 1e-3) >= BUSY_FRACTION:
                self.last_progress[name] = now

    def _watch_steps(self, steps: Callable[[], Mapping[str, int]], now: float, every: float) -> None:
        """A replica whose reported step moved since the last look made progress."""
        if now - self._steps_at < every:
            return
        self._steps_at = now
        try:
            seen = dict(steps())
        except Exception:  # the store may be unreachable: output and CPU decide then
            return
        for name, step in seen.items():
            if name in self._steps and step != self._steps[name]:
                self.last_progress[name] = now
        self._steps.update(seen)

    def _declared(self, idle: Mapping[str, float], limit: float) -> tuple[str, dict[str, float]] | None:
        """(the replica to name, every stalled one's idle seconds) once a stall past ``limit`` is
        declared, else None."""
        stalled = {n: t for n, t in idle.items() if t > limit}
        frozen = [n for n in stalled if self._stopped.get(n)]
        if not frozen and (not stalled or len(stalled) < len(idle)):
            return None  # an idle replica while a peer works is waiting for it, not hung
        longest = max(stalled, key=lambda n: stalled[n])
        return (frozen[0] if frozen else _behind(stalled, self._steps) or longest), stalled

    def _what(self, culprit: str, stalled: Mapping[str, float], limit: str) -> str:
        how = "is stopped (SIGSTOP?) and " if self._stopped.get(culprit) else ""
        others = sorted(n for n in stalled if n != culprit)
        also = f"; also idle, likely waiting for it: {', '.join(others)}" if others else ""
        return (
            f"{culprit} {how}made no progress (no step, no output, no CPU time) for "
            f"{stalled[culprit]:.0f} s ({limit}){also}"
        )

    def _say_notice(self, stall: tuple[str, dict[str, float]] | None) -> None:
        if stall is None:
            if self._noticed is not None and self.notices is not None:
                self.notices.cleared()
            self._noticed = None
            return
        culprit, stalled = stall
        if self._noticed == culprit:
            return
        self._noticed = culprit
        if self.notices is not None:
            ends = f"; it fails after {self.timeout:g} s without progress" if self.timeout else ""
            self.notices.noticed(
                culprit, "stalled: " + self._what(culprit, stalled, f"stall_notice {self.notice:g} s") + ends
            )

    def _doing(self, replica: str) -> str:
        """What the replica was doing: its last console lines, and its stack where py-spy reads it."""
        out = ""
        lines = [line for line in (self.last_lines(replica) if self.last_lines else ()) if line.strip()]
        if lines:
            out += "; last lines of its log:\n" + "\n".join(f"  {line}" for line in lines)
        pid = self._pids.get(replica)
        for stack in stacks(pid) if pid is not None else ():
            out += "\n" + stack
        return out


def stacks(leader: int) -> list[str]:
    """The Python stacks of the processes under ``leader`` (py-spy dump; empty when py-spy is not
    installed or may not read them), each headed by what it is."""
    spy = shutil.which("py-spy", path=os.pathsep.join([str(Path(sys.executable).parent), os.defpath]))
    spy = spy or shutil.which("py-spy")
    if spy is None:
        return []
    out = []
    for pid in _python_processes(leader)[:STACK_PROCESSES]:
        try:
            done = subprocess.run(
                [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=STACK_SECONDS
            )
        except (OSError, subprocess.SubprocessError):
            continue
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or not lines:
            continue
        more = len(lines) - STACK_LINES
        shown = lines[:STACK_LINES] + ([f"... ({more} more lines)"] if more > 0 else [])
        out.append(f"its stack (py-spy dump --pid {pid}):\n" + "\n".join(f"  {line}" for line in shown))
    return out


def _python_processes(leader: int) -> list[int]:
    """The Python interpreters among ``leader``'s descendants (the reaper itself is left out)."""
    found = []
    for pid in proctree.descendants(leader, proctree.children_map()):
        try:
            name = Path(os.readlink(f"/proc/{pid}/exe")).name
        except OSError:
            continue
        if name.startswith("python"):
            found.append(pid)
    return found
