"""What a submit is checked against before it is answered: the target, the project's quota and
its waiting slots, and this machine's size. The same words as the supervisor's own refusal of a
`phalanx run` on this machine (``queue.refusal_words``), so a user meets one message wherever
they submit; a refusal writes nothing."""

from __future__ import annotations

import logging

from phalanx.clusters import load_clusters, usable_clusters
from phalanx.config import Settings
from phalanx.errors import QuotaExceeded, UsageError
from phalanx.plan import Plan
from phalanx.queue import capacity, need_of_plan, never_starts, refusal_words, waiting_count
from phalanx.share import DEFAULT_PROJECT, LOCAL, TOO_MANY_WAITING
from phalanx.store import quotas
from phalanx.store.base import LocalStore

log = logging.getLogger(__name__)


def targets(settings: Settings) -> list[dict[str, str]]:
    """Where a submit may run: this machine, then the clusters registered in the server's home,
    by name and kind only (a cluster's paths and contexts are the server's business). A broken
    entry of the server's clusters.toml is left out (and logged for its admin), never its neighbours."""
    clusters, broken = usable_clusters(settings.home)
    for why in broken:
        log.warning("a cluster is not offered as a target: %s", why)
    return [{"name": LOCAL, "kind": LOCAL}] + [
        {"name": name, "kind": clusters[name].kind} for name in sorted(clusters) if name != LOCAL
    ]


def cluster_of(settings: Settings, target: str) -> str | None:
    """The cluster a target names (None: this machine); UsageError (400) naming the registered ones."""
    known = [t["name"] for t in targets(settings)]
    if target == LOCAL:
        return None
    if target not in known:
        raise UsageError(
            f"target {target!r}: no such compute target on this server; the registered ones are "
            f"{', '.join(known)} (a server admin adds one with `phalanx cluster add`)"
        )
    return target


def backend_of(settings: Settings, plan: Plan, cluster: str | None) -> str:
    """The engine the experiment will run on (what its row says from the start)."""
    if cluster is None:
        return LOCAL
    return load_clusters(settings.home)[cluster].backend_for(str(plan.backend) if plan.backend else None)


def check_size(store: LocalStore, plan: Plan, cluster: str | None) -> None:
    """UsageError (400) for an experiment that could never start: bigger than its project's whole
    quota on the target, or (this machine) than the machine itself."""
    project = plan.project or DEFAULT_PROJECT
    target = cluster or LOCAL
    need = need_of_plan(plan)
    if need.empty:
        return
    quota = quotas.get(store, project, target)
    here = capacity(need_gpus=need.gpus > 0) if cluster is None else None
    never = never_starts(need, project, quota.limit if quota else None, target, here)
    if never:
        raise UsageError(refusal_words(never, oversubscribe=False))


def check_max_waiting(store: LocalStore, settings: Settings, project: str) -> None:
    """QuotaExceeded (429) when the project already has its quota's most experiments waiting here.
    A cheap early answer; the ledger enforces the same limit atomically when the run queues."""
    quota = quotas.get(store, project, LOCAL)
    most = None if quota is None else quota.limit.max_waiting
    if most is None:
        return
    waiting = waiting_count(settings, project)
    if waiting >= most:
        raise QuotaExceeded(
            f"{TOO_MANY_WAITING}: project {project} already has {waiting} experiment{'s' * (waiting != 1)}"
            f" waiting, its quota's most ({most}) on this machine. Submit again when some have started,"
            f" or raise the limit with `phalanx quota set {project} --max-waiting N`"
        )
