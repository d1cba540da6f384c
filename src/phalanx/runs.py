"""Run: a handle on one submitted experiment (Azure ML's Run), read entirely from the store.

Everything here reads what the supervisor and the replicas wrote to the store, so a Run made from an
id in another process (``Run("3f2a9c1b0d4e")``) works the same as the one submit() returned. The only
thing the handle does beyond reading is cancel(), which asks the experiment's supervisor to stop (the
supervisor alone writes status, and stops every replica before marking the experiment stopped).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from phalanx.domain import Experiment, ExperimentStatus, console_sources
from phalanx.errors import PhalanxError
from phalanx.run_api import (
    details_json,
    download_target,
    metrics_json,
    models_json,
    register_source,
    resolve_file,
    write_whole,
)
from phalanx.terminal_text import for_stream

if TYPE_CHECKING:
    from phalanx.config import Settings
    from phalanx.store.artifacts import ArtifactStore
    from phalanx.store.base import LocalStore
    from phalanx.tracking.context import OfflineRun, RunContext

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25
# After the supervisor process is gone without a final status, how long to wait for the row to settle.
ORPHAN_GRACE_SECONDS = 10.0


class RunFailed(PhalanxError):
    """The experiment ended failed (or stopped) and ``raise_on_error`` was set; carries the reason."""

    code = "run_failed"

    def __init__(self, run_id: str, status: str, reason: str | None) -> None:
        self.run_id = run_id
        self.status = status
        self.reason = reason
        super().__init__(f"experiment {run_id} {status}: {reason or 'no reason recorded'}")


class RunTimeout(PhalanxError):
    """wait_for_completion(timeout=...) ran out while the experiment was still going."""

    code = "run_timeout"


class Run:
    """One experiment, as Azure's Run: status, details, metrics, files, logs, cancel.

    Args:
        run_id: the experiment id (or a unique prefix of it).
        settings: where the store is (default: the PHALANX_* environment).
    """

    @classmethod
    def get_context(cls, allow_offline: bool = True) -> RunContext | OfflineRun:
        """Inside a training script: this process's experiment run, Azure's ``Run.get_context()``
        (``run.log``, ``log_list``, ``log_row``, ``log_image``, ``tag``, ``upload_file``); outside
        any experiment an offline run that records nothing (see phalanx.tracking.context)."""
        from phalanx.tracking.context import get_context  # why: `from phalanx import Run` stays light

        return get_context(allow_offline)

    def __init__(self, run_id: str, *, settings: Settings | None = None, _process: Any = None) -> None:
        if settings is None:
            from phalanx.config import Settings  # why: `from phalanx import Run` stays light

            settings = Settings()
        self.settings = settings
        self._id = run_id
        self._process: subprocess.Popen[bytes] | None = _process
        self._store_obj: LocalStore | None = None
        self._artifacts: ArtifactStore | None = None
        self._experiment: Experiment | None = None

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def _store(self) -> LocalStore:
        if self._store_obj is None:
            from phalanx.store import open_store  # why: `from phalanx import Run` stays light

            self._store_obj = open_store(self.settings)
        return self._store_obj

    def refresh(self) -> Experiment:
        """Re-read the experiment row (NotFound until the supervisor has created it)."""
        self._experiment = self._store.get_experiment(self._id)
        self._id = self._experiment.id  # a prefix resolves to the full id
        return self._experiment

    @property
    def id(self) -> str:
        return self._id

    @property
    def experiment(self) -> Experiment:
        return self._experiment or self.refresh()

    def __repr__(self) -> str:
        status = self._experiment.status if self._experiment else "?"
        return f"Run(id={self._id!r}, status={status!s})"

    # -- reading --------------------------------------------------------------------------------

    def get_status(self) -> ExperimentStatus:
        """created, queued, starting, running, succeeded, failed or stopped (a str enum)."""
        return self.refresh().status

    def get_details(self) -> dict[str, Any]:
        """Status, times, reason, topology and every replica's state and exit code."""
        e = self.refresh()
        return details_json(e, self._store.list_replicas(e.id), time.time())

    def get_metrics(self, title: str | None = None) -> dict[str, dict[str, dict[str, list[float]]]]:
        """``{"loss": {"worker 00": {"steps": [...], "values": [...]}}}``, as `phalanx metrics -o json`."""
        return metrics_json(self._store.metrics(self.id, title=title))

    def get_models(self) -> list[dict[str, Any]]:
        """The models the run saved (task.save_model): name, format, path, size, replica, metadata."""
        return models_json(self._store.models(self.id))

    def get_file_names(self) -> list[str]:
        """Every file stored for the run: artifacts and models, as paths download_file accepts."""
        return self._artifact_store().list(self.id)

    def download_file(self, name: str, output_file_path: str | os.PathLike[str] | None = None) -> Path:
        """Copy one stored file to ``output_file_path`` (a file path, or an existing folder to put it
        in; default: the current folder). ``name`` is a path from get_file_names() or an artifact's or
        model's name. Returns the local path. Raises NotFound."""
        named = [(a.name, a.path) for a in self._store.artifacts(self.id)]
        named += [(m.name, m.path) for m in self._store.models(self.id)]
        path = resolve_file(self.id, name, self.get_file_names(), named)
        data = self._artifact_store().read_bytes(self.id, path)
        return write_whole(download_target(path, output_file_path), [data])

    def get_logs(self, replica: str | None = None) -> list[str]:
        """The console lines recorded so far, ``[replica] text`` each."""
        return [f"[{ln.replica}] {ln.text}" for ln in self._store.logs(self.id, replica=replica)]

    def register_model(
        self,
        model_name: str,
        model_path: str | None = None,
        *,
        description: str | None = None,
        tags: Mapping[str, str] | None = None,
        alias: str | None = None,
    ) -> dict[str, Any]:
        """Register the ONNX model the run saved as the next version of ``model_name`` in the model
        registry (`phalanx models register ID --name NAME`), after re-running its ONNX check.

        Args:
            model_path: which saved model: a path from get_models()/get_file_names() or its name
                (default: the run's only ONNX model).
            alias: also point ``model_name@alias`` at the new version.
        Returns:
            the new version as `phalanx models get NAME@N -o json` shows it.
        Raises:
            NotFound, UsageError, ParityFailed (a file that fails its ONNX check).
        """
        from phalanx.registry.checker import check_in_process  # why: `from phalanx import Run` stays light
        from phalanx.registry.door import register_version  # why: `from phalanx import Run` stays light
        from phalanx.registry.service import Registry  # why: `from phalanx import Run` stays light

        source = register_source(self.id, model_path, self.get_models())
        # the embedded mode: the user's own file, checked in the user's own process (registry.checker)
        registry = Registry(self._store, check_in_process)
        return register_version(registry, source, model_name, description, tags, alias)

    def _artifact_store(self) -> ArtifactStore:
        if self._artifacts is None:
            found = self._store.artifact_store
            if found is None:
                from phalanx.store.artifacts import ArtifactStore  # why: `phalanx.Run` stays light

                found = ArtifactStore(self.settings.artifacts_root)
            self._artifacts = found
        return self._artifacts

    # -- waiting and stopping -------------------------------------------------------------------

    def wait_for_completion(
        self,
        show_output: bool = False,
        raise_on_error: bool = True,
        timeout: float | None = None,
        *,
        output: IO[str] | None = None,
    ) -> dict[str, Any]:
        """Block until the experiment has ended; return get_details().

        Args:
            show_output: stream every replica's console, ``[worker-0] ...``, as it arrives.
            raise_on_error: raise RunFailed when it ended failed or stopped.
            timeout: seconds; RunTimeout when still going after that (the run keeps going).
            output: where show_output writes (default sys.stdout).
        Raises:
            RunFailed, RunTimeout.
        """
        stream = output or sys.stdout
        offsets: dict[str, int] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        orphaned_at: float | None = None
        while True:
            experiment = self.refresh()
            if show_output:
                self._print_new_lines(offsets, stream)
            if experiment.status.done:
                break
            if self._supervisor_gone(experiment):
                # The supervisor ended without a final status (killed): give the row a moment, then
                # have reconcile decide and record its end rather than wait forever.
                orphaned_at = orphaned_at or time.monotonic()
                if time.monotonic() - orphaned_at > ORPHAN_GRACE_SECONDS:
                    from phalanx.reconcile import settle  # why: `from phalanx import Run` stays light

                    experiment = settle(self._store, self.settings, self.refresh())
                    if experiment.status.done:
                        break
                    if raise_on_error:
                        raise RunFailed(self.id, "failed", "its supervisor exited without a final status")
                    break
            if deadline is not None and time.monotonic() > deadline:
                raise RunTimeout(f"experiment {self.id} still {experiment.status} after {timeout:g} s")
            time.sleep(POLL_SECONDS)
        if show_output:
            self._print_new_lines(offsets, stream)
        details = self.get_details()
        if raise_on_error and experiment.status in (ExperimentStatus.FAILED, ExperimentStatus.STOPPED):
            raise RunFailed(self.id, str(experiment.status), experiment.reason)
        return details

    def _print_new_lines(self, offsets: dict[str, int], stream: IO[str]) -> None:
        shown = for_stream(stream)  # a terminal: a replica's escape sequences shown, not obeyed
        for replica in console_sources([r.name for r in self._store.list_replicas(self.id)] or ["master"]):
            lines = self._store.logs(self.id, replica=replica, offset=offsets.get(replica, 0))
            for line in lines:
                stream.write(f"[{line.replica}] {shown(line.text)}\n")
            if lines:
                offsets[replica] = lines[-1].offset + 1
        stream.flush()

    def _supervisor_gone(self, experiment: Experiment) -> bool:
        if self._process is not None:
            return self._process.poll() is not None
        # not ours: its pid file, with its start time
        from phalanx.reconcile import gone_recorder  # why: `from phalanx import Run` stays light

        return gone_recorder(self._store, self.settings, experiment) is not None

    def cancel(self, timeout: float = 60.0) -> ExperimentStatus:
        """Stop the experiment as `phalanx stop` does: its supervisor stops every replica and marks it
        stopped (if the supervisor is gone, what the engine still runs is cancelled here). Waits up
        to ``timeout`` seconds for that and returns the status; a run that has ended is left as it
        is, so calling it twice is harmless."""
        experiment = self.refresh()
        if experiment.status.done:
            return experiment.status
        from phalanx.supervisor import stop_experiment  # why: `from phalanx import Run` stays light

        status = stop_experiment(self._store, self.settings, experiment, timeout=timeout)
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=timeout)  # reap it: no zombie in a long-lived notebook
        log.info("experiment %s %s", self.id, status)
        return status
