"""Quotas and fair share on this machine's queue: pure decisions, no files, no processes.

The ledger (``phalanx.machine.ledger``) owns the file and its lock; this module decides, from what the ledger
holds, in which order waiting experiments stand and which of them may start:

* **Quota** (``Limit``): per project and target, the cores, GPUs and memory its experiments may hold
  at once, and how many of them may wait. ``None`` means no limit.
* **Recent usage**: each project's core-seconds, decayed with a half-life of ``HALF_LIFE_SECONDS``
  (an hour): a core held one hour ago counts half as much as one held now. The ledger folds a run's
  usage in when it releases its cores; runs still holding count up to now.
* **Order** (``score``, higher first, ties by arrival)::

      score = priority + aging - SHARE_POINTS * min(1, usage / (machine cores * HALF_LIFE / ln 2))

  ``aging`` is one point per ``AGING_SECONDS`` waited (as before quotas). The fraction is the
  project's recent usage over the most any project could have (the whole machine, held for ever):
  a project that kept the whole machine busy for the last hours loses up to ``SHARE_POINTS`` (10)
  priority points; one that ran nothing loses none. So at equal priority the project with fewer
  recent core-seconds goes first, and a project's hundred trials cannot starve another's single run;
  an explicit priority still outweighs a small difference in usage.
* **Admission pass** (``judge``): walking the waiting runs in that order, a run whose project would
  go over its quota waits ("project vision at its 8-core quota") and reserves nothing; any other run
  either fits in what is free after the runs before it took their share (it starts), or waits and
  keeps what it needs of the free resources for itself (the head-of-queue reservation of the ledger).

Standard library only: the ledger imports it, and the supervisor imports the ledger first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

HALF_LIFE_SECONDS = 3600.0
SHARE_POINTS = 10.0
AGING_SECONDS = 600.0  # one priority point per 10 minutes of waiting
LOCAL = "local"  # the target name of this machine
DEFAULT_PROJECT = "default"  # what a plan names when its file names no project
# the start of every max-waiting refusal: the server answers it 429 even from a supervisor's stderr
TOO_MANY_WAITING = "too many waiting experiments"


@dataclass(frozen=True)
class Limit:
    """What one project may hold at once on one target, and how many of its experiments may wait."""

    cores: int | None = None
    gpus: int | None = None
    memory_mib: float | None = None
    max_waiting: int | None = None

    @property
    def empty(self) -> bool:
        return (
            self.cores is None and self.gpus is None and self.memory_mib is None and self.max_waiting is None
        )


@dataclass(frozen=True)
class Quota:
    """A project's limit on a target, as the store keeps it."""

    project: str
    target: str
    limit: Limit

    def to_json(self) -> dict[str, object]:
        return {
            "project": self.project,
            "target": self.target,
            "cores": self.limit.cores,
            "gpus": self.limit.gpus,
            "memory_mib": self.limit.memory_mib,
            "max_waiting": self.limit.max_waiting,
        }


def quota_of(row: Sequence[Any]) -> Quota:
    """The quota a ``project_quotas`` row (project, target, cores, gpus, memory_mib, max_waiting) holds."""
    project, target, cores, gpus, memory_mib, max_waiting = row
    return Quota(
        str(project),
        str(target),
        Limit(
            cores=None if cores is None else int(cores),
            gpus=None if gpus is None else int(gpus),
            memory_mib=None if memory_mib is None else float(memory_mib),
            max_waiting=None if max_waiting is None else int(max_waiting),
        ),
    )


class Amounts(Protocol):
    """What one experiment needs (``phalanx.machine.ledger.Need``)."""

    @property
    def cpus(self) -> int: ...
    @property
    def gpus(self) -> int: ...
    @property
    def memory_mib(self) -> float: ...


class Waiter(Protocol):
    """A ledger entry as the pass sees it."""

    @property
    def experiment_id(self) -> str: ...
    @property
    def project(self) -> str: ...
    @property
    def need(self) -> Amounts: ...
    @property
    def priority(self) -> int: ...
    @property
    def since(self) -> float: ...


# ---- recent usage -------------------------------------------------------------------------------


def decayed(core_seconds: float, at: float, now: float, half_life: float = HALF_LIFE_SECONDS) -> float:
    """``core_seconds`` recorded at ``at``, as it counts at ``now``."""
    return core_seconds * math.pow(2.0, -max(0.0, now - at) / half_life)


def accrued(cores: float, since: float, now: float, half_life: float = HALF_LIFE_SECONDS) -> float:
    """Decayed core-seconds of ``cores`` held from ``since`` to ``now``, as they count at ``now``:
    the integral of cores * 2^-(now - t)/half_life over the holding time."""
    held = max(0.0, now - since)
    return cores * half_life / math.log(2) * (1.0 - math.pow(2.0, -held / half_life))


def penalty(core_seconds: float, machine_cores: int, half_life: float = HALF_LIFE_SECONDS) -> float:
    """Priority points a project loses for its recent usage (0 to SHARE_POINTS)."""
    most = max(1, machine_cores) * half_life / math.log(2)
    return SHARE_POINTS * min(1.0, max(0.0, core_seconds) / most)


def aging(since: float, now: float) -> int:
    return math.floor(max(0.0, now - since) / AGING_SECONDS)


def score(priority: int, since: float, now: float, usage: float, machine_cores: int) -> float:
    """Where a waiting run stands: higher first (see the module's formula)."""
    return priority + aging(since, now) - penalty(usage, machine_cores)


# ---- admission ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Whether a waiting run may start now, and if not, why (each part for `phalanx queue`)."""

    starts: bool
    quota: str = ""  # "project vision at its 8-core quota"
    short: tuple[tuple[str, float, float], ...] = ()  # (what, needed, free) it lacks on the machine
    ahead: int = 0  # runs ahead of it that it waits behind (quota-blocked ones do not count)
    by_share: int = 0  # of those, the ones ahead only by their project's lower recent usage

    def why(self) -> str:
        if self.quota:
            return self.quota
        if self.starts:
            return "starts at its next look (everything it needs is free)"
        parts = []
        if self.short:
            parts.append("waits for " + ", ".join(_short(*s) for s in self.short))
        if self.ahead and self.by_share == self.ahead:
            parts.append(f"behind {self.ahead} run{'s' * (self.ahead != 1)} of higher share")
        elif self.ahead:
            text = f"{self.ahead} run{'s' * (self.ahead != 1)} ahead of it in the queue"
            if self.by_share:
                text += f" ({self.by_share} of higher share)"
            parts.append(text)
        return "; ".join(parts) or "waits for the runs ahead of it"


def _short(what: str, needed: float, free: float) -> str:
    if what == "memory":
        return f"{needed:g} MiB ({free:g} MiB free)"
    unit = "core" if what == "cpus" else "GPU"
    n = int(needed)
    return f"{n} {unit}{'s' * (n != 1)} ({int(free)} free)"


def quota_problem(project: str, need: Amounts, used: Sequence[float], limit: Limit | None) -> str:
    """Why ``need`` on top of what the project ``used`` (cores, GPUs, MiB) breaks its limit, or ""."""
    if limit is None:
        return ""
    for i, (have, cap, unit) in enumerate(
        (
            (need.cpus, limit.cores, "core"),
            (need.gpus, limit.gpus, "GPU"),
            (need.memory_mib, limit.memory_mib, "MiB"),
        )
    ):
        if cap is None or not have or used[i] + have <= cap + 1e-9:
            continue
        size = f"{cap:g} MiB" if unit == "MiB" else f"{cap}-{unit}"
        text = f"project {project} at its {size} quota"
        if used[i] < cap - 1e-9:
            held = f"{used[i]:g} MiB" if unit == "MiB" else f"{used[i]:g}"
            text += f" ({held} in use or owed, this run needs {have:g})"
        return text
    return ""


def never_within(project: str, need: Amounts, limit: Limit | None, target: str = LOCAL) -> str:
    """Why ``need`` alone exceeds the project's quota (it could never start), or ""."""
    if limit is None:
        return ""
    for have, cap, unit in (
        (need.cpus, limit.cores, "cores"),
        (need.gpus, limit.gpus, "GPUs"),
        (need.memory_mib, limit.memory_mib, "MiB of memory"),
    ):
        if cap is not None and have > cap + 1e-9:
            return (
                f"the experiment needs {have:g} {unit}, more than project {project}'s quota on {target}"
                f" ({cap:g}); raise it with `phalanx quota set {project} --target {target} ...`"
                " or ask for less"
            )
    return ""


def judge(
    waiting: Sequence[Waiter],
    held: Mapping[str, Sequence[float]],
    free: Sequence[float],
    limits: Mapping[str, Limit],
    priorities: Mapping[str, float],
    penalties: Mapping[str, float],
) -> dict[str, Verdict]:
    """The admission pass over ``waiting`` (in queue order): which may start now, and why the
    others wait. ``held``: per project, the (cores, GPUs, MiB) its running experiments hold;
    ``free``: (cores, GPUs, MiB) free on the machine; ``priorities``: each waiting run's priority
    plus aging, and ``penalties``: its project's fair-share penalty, to tell who is ahead by share."""
    avail = [float(x) for x in free]
    owed = {p: [float(x) for x in v] for p, v in held.items()}
    verdicts: dict[str, Verdict] = {}
    reserving: list[Waiter] = []
    for e in waiting:
        project = e.project or DEFAULT_PROJECT
        used = owed.setdefault(project, [0.0, 0.0, 0.0])
        over = quota_problem(project, e.need, used, limits.get(project))
        if over:
            verdicts[e.experiment_id] = Verdict(False, quota=over)
            continue
        need = (float(e.need.cpus), float(e.need.gpus), float(e.need.memory_mib))
        fits = all(n <= a + 1e-9 for n, a in zip(need, avail, strict=True))
        if fits:
            verdicts[e.experiment_id] = Verdict(True)
        else:
            short = tuple(
                (what, n, max(0.0, f))
                for what, n, f in zip(("cpus", "gpus", "memory"), need, free, strict=True)
                if n > f + 1e-9
            )
            mine = priorities.get(e.experiment_id, 0.0)
            mine_pen = penalties.get(e.experiment_id, 0.0)
            by_share = sum(
                1
                for r in reserving
                if priorities.get(r.experiment_id, 0.0) <= mine
                and penalties.get(r.experiment_id, 0.0) < mine_pen
            )
            verdicts[e.experiment_id] = Verdict(False, short=short, ahead=len(reserving), by_share=by_share)
        # started or owed: either way it takes its need out of what is free, before those behind it
        avail = [max(0.0, a - n) for a, n in zip(avail, need, strict=True)]
        for i in range(3):
            used[i] += need[i]
        reserving.append(e)
    return verdicts
