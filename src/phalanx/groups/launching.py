"""One way to start a group (a hyperparameter search), shared by `phalanx group run|resume`, the
server (its submit records the group; its launcher ``check``s and ``start``s it after the answer,
and starts it again when its controller is gone: ``groups.detached.adopt``) and the HyperDrive
estimator (``Experiment.submit(HyperDriveConfig)``), as ``phalanx.runner.Runner`` is the one way
to start an experiment.

``GroupLauncher(settings, store)``:
  ``check(group, options)``: refuse what cannot run (Optuna missing, a trial the cluster can never
  run, the trials' environment failing to build).
  ``create(group, options) -> Group``: ``check``, then record the group (status created); nothing
  is recorded on a refusal.
  ``start(group_id) -> Popen``: its controller in its own session (`python -m phalanx.groups ID`,
  output appended to groups/ID/controller.log), so that neither a Ctrl-C at a terminal nor a server
  that stops ends the search; returns at once.
  ``submit(group, options) -> Started``: ``create``, then ``start``.
  ``run(group_id, say) -> Group``: the controller in this process, to the group's end.

The group is handed over as the validated ``GroupSpec`` and typed ``GroupOptions``: no caller writes
a file for a `phalanx` CLI to parse again, and none reads an id from a process's output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.config import Settings
from phalanx.domain import Group
from phalanx.extras import require
from phalanx.groups.controller import Controller
from phalanx.groups.setup import build_trials_env, check_trials_can_run, create
from phalanx.machine.box import Isolation
from phalanx.spec.group import GroupSpec
from phalanx.store import open_store
from phalanx.store.base import LocalStore

CONTROLLER_LOG = "controller.log"  # groups/ID/controller.log: a detached controller's output


@dataclass(frozen=True)
class GroupOptions:
    """Everything about a group's launch that is not its file: where its trials start (default:
    the file's folder), the `--param` values over every trial's, the cluster they run on (None:
    this machine), whether they share cores (`--oversubscribe`), how its file was read (kept to
    read it back the same way: ``recorded_group_spec``), and ``isolation``: a server's group, its trials'
    build and every trial boxed as its project's (phalanx.machine.box; None: as the caller)."""

    workdir: Path | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    cluster: str | None = None
    oversubscribe: bool = False
    allow_unused: bool = False
    extra_params: bool = False
    isolation: Isolation | None = None


@dataclass(frozen=True)
class Started:
    """A group recorded and its controller started (the caller reaps ``process`` or leaves it be)."""

    group: Group
    process: subprocess.Popen[bytes]


class GroupLauncher:
    """``store``: the group store to record in (default: the settings' store, opened when needed)."""

    def __init__(self, settings: Settings | None = None, store: LocalStore | None = None) -> None:
        self.settings = settings or Settings()
        self._store = store

    @property
    def store(self) -> LocalStore:
        if self._store is None:
            self._store = open_store(self.settings)
        return self._store

    def create(self, group: GroupSpec, options: GroupOptions) -> Group:
        """Check that the trials can run, then record the group (nothing is recorded on a refusal:
        UsageError, exit status 2)."""
        self.check(group, options)
        return create(
            self.store,
            group,
            workdir=options.workdir,
            params=dict(options.params),
            cluster=options.cluster,
            oversubscribe=options.oversubscribe,
            allow_unused=options.allow_unused,
            extra_params=options.extra_params,
            isolation=options.isolation,
        )

    def check(self, group: GroupSpec, options: GroupOptions) -> None:
        """Refuse (UsageError) a group whose trials cannot run: Optuna missing, a trial the cluster
        can never run, the trials' environment failing to build (built here once, for every
        trial). ``create`` checks first; the server's launcher checks a group its submit recorded."""
        require("optuna", "search", "a group (hyperparameter search)")
        if options.cluster is not None:  # a trial the cluster can never run: refused now
            check_trials_can_run(
                group,
                self.settings,
                cluster=options.cluster,
                workdir=options.workdir,
                oversubscribe=options.oversubscribe,
                isolation=options.isolation,
            )
        else:  # every trial shares one build: a failing one refused now, not once per trial
            build_trials_env(group, self.settings, workdir=options.workdir, isolation=options.isolation)

    def start(self, group_id: str) -> subprocess.Popen[bytes]:
        """Start the recorded group's controller (or a controller again: `phalanx group resume -d`,
        a restarted server adopting it) in its own session and return at once."""
        folder = self.settings.home / "groups" / group_id
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / CONTROLLER_LOG, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-P", "-m", "phalanx.groups", group_id],  # -P: no folder on its path
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._environment(),
                start_new_session=True,
                close_fds=True,
            )

    def submit(self, group: GroupSpec, options: GroupOptions) -> Started:
        """``create``, then ``start``: the group exists when this returns."""
        record = self.create(group, options)
        return Started(record, self.start(record.id))

    def run(self, group_id: str, say: Callable[[str], None]) -> Group:
        """Run (or resume) the group's controller here, to the group's end; ``say``: its progress."""
        return Controller(self.store, self.settings, group_id, say=say).run()

    def _environment(self) -> dict[str, str]:
        """This process's environment, with where the store is as this launcher's settings say."""
        env = dict(os.environ)
        env["PHALANX_HOME"] = str(self.settings.home)
        for var, value in (
            ("PHALANX_DB_URL", self.settings.db_url),
            ("PHALANX_ARTIFACTS_URL", self.settings.artifacts_url),
        ):
            if value:
                env[var] = value
        return env
