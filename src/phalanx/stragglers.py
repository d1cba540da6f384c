"""The pace of each rank: steps per second from the steps each replica reports and their times, and
the straggler, the slowest rank when it lags the median by more than a threshold.

The series used is the metric title reported by the most replicas (one series per replica, as
``phalanx.log_metrics`` and ``report_scalar(title, task.replica, ...)`` write; ``system/...`` series
are not steps). Each rank's pace is measured over its last WINDOW points, so a rank that slowed down
late in a long run shows it; while it runs, a rank that stopped reporting is measured up to now.
THRESHOLD (20 %, or PHALANX_STRAGGLER_THRESHOLD in percent) keeps the
ordinary jitter of a shared machine from naming anybody.

Series are named by the user (``rank 1``, seed 003's style, as well as the replica's name): each is
mapped to the replica that reported its points (``store.series_replicas``), so a rank's row, its
stall and the straggler name the replica whatever its series is called.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from phalanx import knobs
from phalanx.domain import ExperimentStatus, ReplicaState

if TYPE_CHECKING:
    from phalanx.domain import Experiment, Replica, Series


class PaceRecords(Protocol):
    """What the pace of each rank reads: the full store's, the lean reader's or the lean writer's."""

    def get_experiment(self, experiment_id: str) -> Experiment: ...

    def list_replicas(self, experiment_id: str) -> list[Replica]: ...

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]: ...

    def last_points(self, experiment_id: str, title: str, n: int) -> dict[str, Series]: ...

    def series_replicas(self, experiment_id: str, title: str) -> dict[str, str]: ...


WINDOW = 20
THRESHOLD_PERCENT = 20.0
# A running rank silent for longer than this many of its own step intervals (and at least
# STALL_SECONDS, so clock skew between nodes does not count) is stalled: its pace runs to now.
STALL_STEPS = 3.0
STALL_SECONDS = 10.0


def _threshold() -> float:
    return knobs.STRAGGLER_THRESHOLD.value()


def _rate(steps: list[int], times: list[float], now: float | None = None) -> tuple[float, float] | None:
    """(steps per second, seconds it has been silent when stalled else 0). ``now``: the rank is
    still running, so a rank that stopped reporting (hung in a collective, stuck on I/O) slows
    down as time passes instead of keeping the pace it had before it stopped."""
    if len(steps) < 2:
        return None
    steps, times = steps[-WINDOW:], times[-WINDOW:]
    span = times[-1] - times[0]
    if span <= 0:
        return None
    silent = 0.0
    if now is not None and now - times[-1] > max(STALL_STEPS * span / (len(steps) - 1), STALL_SECONDS):
        silent = now - times[-1]
        span = now - times[0]
    return (steps[-1] - steps[0]) / span, silent


def _owners(store: PaceRecords, experiment_id: str, title: str) -> dict[str, str] | None:
    """series -> the replica reporting it, when each series comes from a replica of its own (the
    pace's premise: one series per rank). Otherwise (one process reporting every rank's series,
    or a store without the mapping) the series' names stand for the replicas, as they say, when
    each is a replica's name or numbered like a rank (``rank 1``, ``gpu-0``); None when they are
    not ranks at all (one script's ``train`` and ``val``: no pace is measured between them)."""
    try:
        owners = dict(store.series_replicas(experiment_id, title))
    except Exception:  # a view: without the mapping, series names stand for replicas as before
        return {}
    if len(set(owners.values())) == len(owners):
        return owners
    try:
        replicas = {r.name for r in store.list_replicas(experiment_id)}
    except Exception:  # as above
        replicas = set()
    ranks = all(name in replicas or any(c.isdigit() for c in name) for name in owners)
    return {} if ranks else None


def _ranks_title(store: PaceRecords, experiment_id: str) -> tuple[str, dict[str, str]] | None:
    """The title whose series the pace reads, with its series' owners (``_owners``): of the titles
    whose series are ranks, the one most series report (``system/...`` left out); None when none."""
    titles = store.metric_titles(experiment_id)
    candidates = [
        (len(series), t) for t, series in titles.items() if not t.startswith("system/") and len(series) > 1
    ]
    for _, title in sorted(candidates, reverse=True):
        owners = _owners(store, experiment_id, title)
        if owners is not None:
            return title, owners
    return None


def last_steps(store: PaceRecords, experiment_id: str) -> dict[str, int]:
    """replica -> the last step it reported in the series most replicas report (the pace's), for
    the liveness check: in a synchronous job, the ranks that got further wait for the one behind."""
    ranked = _ranks_title(store, experiment_id)
    if ranked is None:
        return {}
    title, owners = ranked
    out: dict[str, int] = {}
    for name, series in store.last_points(experiment_id, title, 1).items():
        if series.steps:
            replica = owners.get(name, name)
            out[replica] = max(out.get(replica, series.steps[-1]), series.steps[-1])
    return out


def _running_replicas(store: PaceRecords, experiment_id: str) -> set[str]:
    """The replicas running now (none unless the experiment runs): only they can be stalled."""
    try:
        if store.get_experiment(experiment_id).status is not ExperimentStatus.RUNNING:
            return set()
        return {r.name for r in store.list_replicas(experiment_id) if r.state is ReplicaState.RUNNING}
    except Exception:  # the pace is a view: without the states it is measured as for a finished run
        return set()


def pace(
    store: PaceRecords, experiment_id: str, threshold_percent: float | None = None
) -> dict[str, Any] | None:
    """{title, ranks: [{replica, steps_per_second, last_step}], median, threshold_percent, straggler}
    or None when fewer than two replicas report a common series (or its series are no ranks:
    ``_owners``)."""
    ranked = _ranks_title(store, experiment_id)
    if ranked is None:
        return None
    title, owners = ranked
    by_series = store.last_points(experiment_id, title, WINDOW)
    running = _running_replicas(store, experiment_id)
    now = time.time()
    ranks = []
    for name, series in sorted(by_series.items()):
        times = series.times or []
        if len(times) != len(series.steps):
            continue
        replica = owners.get(name, name)
        got = _rate(list(series.steps), list(times), now if replica in running else None)
        if got is None:
            continue
        rate, silent = got
        rank: dict[str, Any] = {"replica": replica, "steps_per_second": rate, "last_step": series.steps[-1]}
        if replica != name:
            rank["series"] = name
        if silent:
            rank["silent_seconds"] = silent
        ranks.append(rank)
    if len(ranks) < 2:
        return None
    import statistics  # why: its fractions and decimal only once two ranks report a pace (issue 42)

    median = statistics.median(r["steps_per_second"] for r in ranks)
    threshold = _threshold() if threshold_percent is None else threshold_percent
    slowest = min(ranks, key=lambda r: r["steps_per_second"])
    straggler = None
    if median > 0:
        behind = (median - slowest["steps_per_second"]) / median * 100
        if behind > threshold:
            straggler = {**slowest, "behind_percent": behind}
    return {
        "title": title,
        "ranks": ranks,
        "median_steps_per_second": median,
        "threshold_percent": threshold,
        "straggler": straggler,
    }
