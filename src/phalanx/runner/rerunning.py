"""The rerun rule, shared by `phalanx rerun ID` and the server's clone-and-enqueue
(``POST /experiments {"from": ID, ...}``): which recorded file, params and source snapshot a new
experiment starts from, and the new experiment's options, which record its origin (``rerun_of``).

By default the rerun runs what the origin's last successful attempt ran (after a `phalanx resume`
with edited code, the edited code), or what attempt ``attempt`` ran; the given param changes go over
the recorded params. A name the origin never had is checked as `phalanx run` checks it (refused
unless ``extra_params``). Every refusal is a UsageError raised before anything is written.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from phalanx import repro
from phalanx.data.lineage import latest_inputs, pin_inputs
from phalanx.domain import Experiment
from phalanx.errors import UsageError
from phalanx.machine.box import isolation_of
from phalanx.runner.options import LaunchOptions, LaunchRecord
from phalanx.spec.loader import load_spec_text
from phalanx.spec.model import ExperimentSpec
from phalanx.store.base import Store


@dataclass(frozen=True)
class RerunSource:
    """What a rerun of ``origin`` starts from: the validated spec with the new params, the launch
    record it came from, the snapshot's bytes and a note of what the snapshot left out (or None)."""

    origin: Experiment
    spec: ExperimentSpec
    launch: Mapping[str, Any]
    params: Mapping[str, Any]
    snapshot: bytes
    note: str | None

    def options(self, new_id: str, workdir: Path, priority: int = 0) -> LaunchOptions:
        """The new experiment's options: run in ``workdir`` (the unpacked snapshot), record its origin."""
        record = LaunchRecord.from_json(self.launch)
        return LaunchOptions(
            workdir=workdir,
            cluster=self.launch.get("cluster"),
            oversubscribe=bool(self.launch.get("oversubscribe")),
            priority=priority,
            experiment_id=new_id,
            system_metrics=self.launch.get("system_metrics"),
            record=replace(record, params=dict(self.params), rerun_of=self.origin.id, rerun_at=time.time()),
            isolation=isolation_of(self.launch),  # a boxed run's rerun is boxed the same way
        )


def launch_of(store: Store, experiment: Experiment) -> dict[str, Any]:
    """The launch an experiment recorded (file, params, folder, cluster); UsageError when Phalanx
    did not start it or it recorded none, saying what to do instead."""
    launch = dict((store.repro(experiment.id) or {}).get("launch") or {})
    if experiment.backend == "script":  # `phalanx run -f FILE` is no help here
        raise UsageError(
            f"experiment {experiment.id} is a plain script's run (a script calling "
            "Task.init, not `phalanx run`): Phalanx did not start it, so it cannot start it again; "
            f"run the script again yourself (`phalanx get {experiment.id}` shows the code it ran)"
        )
    if not launch and experiment.started_at is None:
        raise UsageError(never_started(experiment))
    if not launch or not experiment.spec_text:
        raise UsageError(
            f"experiment {experiment.id} was recorded without its launch details (file, folder, params); "
            "start it again with `phalanx run -f FILE`"
        )
    return launch


def param_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def never_started(experiment: Experiment) -> str:
    """An experiment stopped while it waited in the queue never ran: no attempt, checkpoint or
    snapshot to go on from. Said as such, with the `phalanx run` that puts it in the queue again
    (its file and --param values are kept with its plan), not as a record missing its details."""
    launch = (experiment.plan or {}).get("launch") or {}
    file, params = launch.get("file"), dict(launch.get("params") or {})
    again = "`phalanx run -f FILE`"
    if file:
        args = ["phalanx", "run", "-f", str(file)]
        for name, value in params.items():
            args += ["--param", f"{name}={param_text(value)}"]
        again = f"`{shlex.join(args)}`"
    return (
        f"experiment {experiment.id} never started (it was {experiment.status} while it waited in the"
        f" queue): there is no run, checkpoint or snapshot of it to go on from; start it again with {again}"
    )


def attempt_numbers(store: Store, experiment_id: str) -> list[int]:
    """The numbers of the attempts ``experiment_id`` has (its attempt rows, and those its record
    names), in order; [0] for one that kept no attempt rows (a `Task.init` script)."""
    rows = {int(a.get("number") or 0) for a in store.attempts(experiment_id)}
    recorded = {int(a.get("attempt") or 0) for a in store.repro(experiment_id).get("attempts") or []}
    return sorted(rows | recorded) or [0]


def no_such_attempt(experiment_id: str, attempt: int, known: list[int]) -> str:
    """`experiment 3f2a has no attempt 5; its only attempt is 0 (...)`: what an ID@N or --attempt N
    past the last attempt is told."""
    which = f"its only attempt is {known[0]}" if len(known) == 1 else f"its attempts are {_listed(known)}"
    listing = f"`phalanx get {experiment_id}` lists them"
    return f"experiment {experiment_id} has no attempt {attempt}; {which} ({listing})"


def _listed(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers))


def rerun_record(store: Store, experiment_id: str, attempt: int | None) -> dict[str, Any]:
    """The record a rerun starts from: attempt ``attempt``'s, else the last successful attempt's."""
    record = store.repro(experiment_id)
    if attempt is None:
        return repro.rerun_record(record, store.attempts(experiment_id))
    known = attempt_numbers(store, experiment_id)
    if attempt not in known:
        raise UsageError(no_such_attempt(experiment_id, attempt, known))
    found = repro.attempt_record(record, attempt)
    if found is None:
        numbers = [int(a.get("attempt") or 0) for a in record.get("attempts") or []] or [0]
        raise UsageError(
            f"attempt {attempt} of experiment {experiment_id} recorded no code of its own (a restart "
            f"runs the code of the attempt before it); attempts with a record: "
            f"{', '.join(map(str, numbers))} (`phalanx get {experiment_id}` lists them)"
        )
    return found


def rerun_source(
    store: Store,
    experiment_id: str,
    changes: Mapping[str, Any],
    *,
    attempt: int | None = None,
    extra_params: bool = False,
    latest_data: bool = False,
) -> RerunSource:
    """Everything a rerun of ``experiment_id`` with ``changes`` needs, checked; nothing written.
    Its dataset inputs are the versions the original read, or with ``latest_data`` each dataset's
    latest version (a missing dataset is then a NotFound when the rerun is prepared, exit 2)."""
    experiment = store.get_experiment(experiment_id)
    launch = launch_of(store, experiment)
    record = rerun_record(store, experiment.id, attempt)
    launch = {**launch, **dict(record.get("launch") or {})}
    recorded = dict(launch.get("params") or {})
    params = {**recorded, **dict(changes)}
    filename = launch.get("file") or "<stored file>"
    # The recorded params were accepted at launch (some perhaps with --extra-params); a name only
    # the rerun adds is checked as `phalanx run` checks it.
    new_names = {k: v for k, v in changes.items() if k not in recorded}
    spec_text = experiment.spec_text or ""
    if new_names and not extra_params:
        load_spec_text(spec_text, filename, new_names)
    spec = load_spec_text(spec_text, filename, params, extra_params=True)
    snap = (record.get("snapshot") or {}).get("path")
    artifacts = store.artifact_store
    if not (snap and artifacts is not None and artifacts.exists(experiment.id, snap)):
        which = f"attempt {attempt} of experiment" if attempt is not None else "experiment"
        raise UsageError(f"{which} {experiment.id} has no source snapshot to rerun from")
    # the same dataset versions as the original, unless asked for the latest ones
    spec = latest_inputs(spec) if latest_data else pin_inputs(spec, experiment.plan)
    return RerunSource(
        origin=experiment,
        spec=spec,
        launch=launch,
        params=params,
        snapshot=artifacts.read_bytes(experiment.id, snap),
        note=repro.left_out_note(record.get("snapshot")),
    )
