"""What a resume runs: a failed or stopped experiment continued as a new attempt of itself, from
its recorded launch (file text, params, folder, cluster, box) and the dataset versions it started
with. `phalanx resume ID` on this machine and the server's ``POST /experiments/{id}/resume`` both
ask here, so the rules and the refusals are the same on both doors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from phalanx.data.lineage import pin_inputs
from phalanx.domain import Experiment, ExperimentStatus
from phalanx.errors import Conflict, UsageError, not_resumable
from phalanx.machine.box import isolation_of
from phalanx.runner.options import LaunchOptions, LaunchRecord
from phalanx.runner.rerunning import launch_of
from phalanx.spec.loader import load_spec_text
from phalanx.spec.model import ExperimentSpec
from phalanx.store.base import Store


@dataclass(frozen=True)
class Resume:
    """What to start (``Runner.prepare``/``submit`` with ``options``), and a note to say first."""

    spec: ExperimentSpec
    options: LaunchOptions
    note: str | None


def resume_of(store: Store, experiment: Experiment) -> Resume:
    """The resume of ``experiment``. Raises Conflict when it is not failed or stopped (naming
    `phalanx rerun` for a succeeded one that can be rerun), UsageError when Phalanx cannot start it
    again (no recorded launch, its folder gone)."""
    if not experiment.status.resumable:
        launch = (store.repro(experiment.id) or {}).get("launch")  # rerun needs the recorded launch
        rerunnable = experiment.status is ExperimentStatus.SUCCEEDED and bool(launch and experiment.spec_text)
        hint = " (use `phalanx rerun` to run it again)" if rerunnable else ""
        raise Conflict(str(not_resumable(experiment.id, experiment.status)) + hint)
    launch = launch_of(store, experiment)
    note = None
    if experiment.group_id:  # the search decided on this trial already: resuming it is the user's own
        note = (
            f"experiment {experiment.id} is a trial of group {experiment.group_id}; the group keeps"
            " what it recorded of this trial (its state and value) and its search does not see this"
            " resume (`phalanx get` shows the resumed run)"
        )
    workdir = launch.get("workdir")
    if not workdir or not Path(workdir).is_dir() or not os.access(workdir, os.X_OK):
        raise UsageError(
            f"the experiment's folder {workdir} is gone, or this account may not enter it; use"
            f" `phalanx rerun {experiment.id}` (its snapshot)"
        )
    # the recorded params were accepted at launch (some perhaps with --extra-params): not checked again
    spec = load_spec_text(
        experiment.spec_text or "",
        launch.get("file") or "<stored file>",
        launch.get("params"),
        extra_params=True,
    )
    options = LaunchOptions(
        workdir=Path(workdir),
        cluster=launch.get("cluster"),
        oversubscribe=bool(launch.get("oversubscribe")),
        experiment_id=experiment.id,
        system_metrics=launch.get("system_metrics"),
        record=LaunchRecord.from_json(launch),
        resume=True,
        isolation=isolation_of(launch),  # a boxed experiment resumes in its box
    )
    return Resume(pin_inputs(spec, experiment.plan), options, note)
