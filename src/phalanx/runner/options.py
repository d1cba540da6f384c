"""How an experiment is launched: typed options, and the record `phalanx rerun`/`resume` start from."""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.machine.box import Isolation

if TYPE_CHECKING:
    from phalanx.spec.model import ExperimentSpec

LAUNCH_FILE = "launch.pickle"  # runs/<id>/launch.pickle: what `python -m phalanx.runner` supervises
# runs/<id>/launch.lock: taken by whoever writes the launch, before it does, and handed to the
# supervisor it starts, which holds it for its whole life. Free while the run folder exists and the
# experiment does not: nothing will ever create it (its launcher and supervisor are both gone).
LAUNCH_LOCK = "launch.lock"
LAUNCH_LOCK_FD = "PHALANX_LAUNCH_LOCK_FD"  # the lock's fd in a supervisor started as a process


@dataclass(frozen=True)
class LaunchRecord:
    """What is kept with the experiment so that `phalanx rerun` and `phalanx resume` can start it
    again: the file it came from and the params given at launch (a rerun adds where it came from)."""

    file: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    rerun_of: str | None = None
    rerun_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"file": self.file, "params": dict(self.params)}
        if self.rerun_of is not None:
            doc["rerun_of"] = self.rerun_of
            doc["rerun_at"] = self.rerun_at
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LaunchRecord:
        """The record as the store keeps it (``repro.launch``); other keys are options, not record."""
        rerun_at = doc.get("rerun_at")
        return cls(
            file=doc.get("file"),
            params=dict(doc.get("params") or {}),
            rerun_of=doc.get("rerun_of"),
            rerun_at=float(rerun_at) if rerun_at is not None else None,
        )


@dataclass(frozen=True)
class LaunchOptions:
    """Everything about a launch that is not the experiment file itself.

    ``wait``: False refuses (UsageError) instead of queueing when this machine is busy.
    ``system_metrics``: None as the environment says (PHALANX_SYSTEM_METRICS), "off" for none, or a
    sampling interval. ``resume``: continue the existing failed or stopped ``experiment_id``.
    ``params_section``: record the declared params (the file's ``params`` after `--param`, an
    estimator's ``script_params``) as the experiment's tracked params in this section, so `phalanx
    params`, the run table's ``param:KEY`` and Compare show them: ``Declared`` by default, ``Trial``
    for a group's trials; None records none.
    ``notify``: a FIFO that gets one byte once the experiment's end is recorded (a group's
    controller wakes on it). ``accepted``: the server recorded the experiment when it accepted the
    submit (status created): its supervisor updates that row instead of creating one, and holds
    ``runs/<id>/supervisor.lock`` for its whole life (the server's launcher tells by it whether
    the experiment's supervisor still runs). ``isolation``: run it boxed (a server's submission:
    its project's account, namespaces, allow-listed environment; phalanx.machine.box), None as the
    caller's user.
    """

    workdir: Path | None = None
    cluster: str | None = None
    oversubscribe: bool = False
    priority: int = 0
    wait: bool = True
    experiment_id: str | None = None
    system_metrics: str | None = None
    record: LaunchRecord = field(default_factory=LaunchRecord)
    resume: bool = False
    # the declared params' section (a trial's: "Trial"); domain.DECLARED_PARAMS spelled out, as
    # `run --detach` loads no domain model (tests/unit/runner/test_options.py holds them equal)
    params_section: str | None = "Declared"
    notify: str | None = None
    isolation: Isolation | None = None
    accepted: bool = False

    def apply_environment(self) -> None:
        """The supervisor and the engines read the system-metrics choice from the environment (a
        cluster job's sampler gets it from there too): set it in the process that supervises."""
        if self.system_metrics:
            os.environ["PHALANX_SYSTEM_METRICS"] = self.system_metrics


@dataclass(frozen=True)
class Launch:
    """What a detached supervisor reads from its run folder: the validated spec and its options.

    Pickled, not dumped as YAML: the supervisor gets the very object the caller validated (the same
    Phalanx on the same machine wrote it into the user's own PHALANX_HOME). ``remove_run_dir``: the
    supervisor removes its run folder itself if it fails before the experiment exists (its log is
    elsewhere, as a group trial's is); else the caller that waits reads the log there and removes it.
    """

    spec: ExperimentSpec
    options: LaunchOptions
    remove_run_dir: bool = False
    headline: str | None = None  # said first in its log (`rerun of ID from its snapshot`)


def write_launch(run_dir: Path, launch: Launch) -> Path:
    """Atomically: a supervisor never reads half a launch."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LAUNCH_FILE
    tmp = path.with_name(f"{LAUNCH_FILE}.{os.getpid()}.tmp")
    tmp.write_bytes(pickle.dumps(launch, protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(tmp, path)
    return path


def read_launch(run_dir: Path) -> Launch:
    launch = pickle.loads((run_dir / LAUNCH_FILE).read_bytes())
    if not isinstance(launch, Launch):
        raise TypeError(f"{run_dir / LAUNCH_FILE} holds no launch")
    return launch
