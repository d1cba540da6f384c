"""A group's end seen from outside its controller: whether a controller holds its lock, `phalanx
group stop` (ask the controller; if none runs, stop the trials here), stopping many experiments at
once, and what a deleted group leaves in a home (``remove_folders``). The group as `group get -o
json` and the API show it is the store's (``store.group_views``)."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from phalanx.config import Settings
from phalanx.domain import Group, GroupStatus, Trial, TrialState, TrialUpdate
from phalanx.errors import NotFound
from phalanx.groups.lock import holder
from phalanx.store.base import GroupStore
from phalanx.store.group_views import controller_alive, last_point


def controller_locked(group_id: str, settings: Settings) -> bool:
    """Whether a controller of this group holds its lock on this machine (one that is still
    starting has not yet written its pid to the group's record)."""
    return holder(settings.home / "groups" / group_id) is not None


def stop_group(store: GroupStore, settings: Settings, group: Group, timeout: float = 60.0) -> Group:
    """`phalanx group stop`: ask the controller; if none runs, stop the running trials here."""
    store.update_group(group.id, stop_requested=True)
    if controller_alive(group) or controller_locked(group.id, settings):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = store.get_group(group.id)
            if current.done:
                return current
            if not controller_alive(current) and not controller_locked(current.id, settings):
                break
            time.sleep(0.2)
    current = store.get_group(group.id)
    if current.done:
        return current
    reason = "stopped by phalanx group stop"
    unfinished = [t for t in store.list_trials(group.id) if not t.state.finished]
    experiments = []
    for t in unfinished:
        with contextlib.suppress(NotFound):  # its launch never created it
            experiments.append(store.get_experiment(t.experiment_id))
            store.link_experiment(t.experiment_id, group.id)  # a controller killed before it saw it
    stop_all(store, settings, experiments, reason, timeout=timeout)
    for t in unfinished:
        ended = ended_while_unwatched(store, current, t)
        if ended is not None:  # the controller was dead when this trial finished: keep its outcome
            store.update_trial(group.id, t.number, **ended)
            continue
        store.update_trial(
            group.id, t.number, state=TrialState.STOPPED, reason=reason, finished_at=time.time()
        )
    store.update_group(
        group.id, status=GroupStatus.STOPPED, reason=reason, finished_at=time.time(), controller_pid=None
    )
    return store.get_group(group.id)


def ended_while_unwatched(store: GroupStore, group: Group, trial: Trial) -> TrialUpdate | None:
    """A trial recorded as running whose experiment had already ended before `group stop` (its
    controller killed, nobody watching): succeeded with the metric is `done` with its last value (it
    can be the best trial), failed is `failed`; None when the stop is what ended it."""
    try:
        exp = store.get_experiment(trial.experiment_id)
    except NotFound:
        return None
    status = str(exp.status)
    finished = exp.finished_at or time.time()
    if status == "failed":
        return {"state": TrialState.FAILED, "reason": exp.reason, "finished_at": finished}
    if status != "succeeded" or not group.metric:
        return None
    last = last_point(store, trial.experiment_id, group.metric)
    if last is None:
        return None
    step, value = last
    return {"state": TrialState.DONE, "value": value, "step": step, "finished_at": finished}


def stop_all(
    store: GroupStore, settings: Settings, experiments: list[Any], reason: str, timeout: float
) -> None:
    """Stop these experiments all at once, not one after the other: each stop waits for its
    supervisor (on Slurm: scancel, then the job's end), and a trial still queued behind a running
    one must be cancelled before the running one's nodes free up and Slurm starts it."""
    from phalanx.supervisor import stop_experiment  # why: `phalanx group ls|get`: no supervisor

    running = [e for e in experiments if not e.status.done]
    if not running:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(running))) as pool:
        futures = [
            pool.submit(stop_experiment, store, settings, e, timeout=timeout, reason=reason) for e in running
        ]
        for f in futures:
            f.result()


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, default=str)


def remove_folders(settings: Settings, group_id: str, experiment_ids: Sequence[str]) -> None:
    """What a deleted group (``Store.remove_group``) leaves in this machine's home: its own folder
    (the study, its trials' files and the controller's log) and its trials' run and spool folders."""
    trials = [f for e in experiment_ids for f in (settings.spool_dir / e, settings.runs_dir / e)]
    for folder in [settings.home / "groups" / group_id, *trials]:
        shutil.rmtree(folder, ignore_errors=True)
