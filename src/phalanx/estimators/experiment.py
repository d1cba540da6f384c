"""Experiment(name, project).submit(estimator) -> Run: start an estimator the way `phalanx run` would.

submit() writes the estimator's experiment file into the run folder (PHALANX_HOME/runs/<id>/) and
starts the same supervisor `phalanx run` uses, detached in its own session with its output in a file,
so the Python process that submitted may go on (or exit) while the experiment runs. It returns once
the supervisor has created the experiment in the store (before any environment build: its status is
then ``building``), so `run.get_status()` works at once; an error
the supervisor finds before starting anything (a cluster that does not exist, more GPUs than the
machine has) is raised here, as the CLI would print it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.checkpoints import ENV_RESUME, ENV_RESUME_STEP, from_artifacts, latest
from phalanx.clusters import load_clusters
from phalanx.config import Settings
from phalanx.ends import Asker, Facts, decide
from phalanx.errors import NotFound, PhalanxError, SpecError, UsageError
from phalanx.estimators.estimator import Estimator
from phalanx.estimators.sweep import HyperDriveConfig, submit_sweep
from phalanx.ids import new_id
from phalanx.priority import check_priority
from phalanx.reconcile import record_end
from phalanx.run_api import RunAPI
from phalanx.runner import LaunchOptions, LaunchRecord, Runner, StartFailed, StartTimeout
from phalanx.runs import Run
from phalanx.spec.dump import spec_to_yaml
from phalanx.spec.loader import load_spec_text
from phalanx.store import open_store

if TYPE_CHECKING:
    from phalanx.machine.forks import ChildProcess
    from phalanx.store.catalog import Catalog

log = logging.getLogger(__name__)

SPEC_FILE = "experiment.yml"
SUPERVISOR_LOG = "supervisor.log"
SUBMIT_FILE = "submit.json"  # how this run was started (supervisor pid), read by Run.cancel
STARTUP_TIMEOUT = 120.0  # generous: 2 shared cores
_KEEP_ENV = frozenset(
    {"PHALANX_HOME", "PHALANX_DB_URL", "PHALANX_ARTIFACTS_URL", "PHALANX_HOST", "PHALANX_TOKEN"}
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:-]{0,127}$")


class Experiment:
    """A named group of runs in a project (Azure's Experiment; Phalanx's experiment name + project).

    Args:
        name: shown in `phalanx ls` and the UI.
        project: groups experiments (default "default").
        settings: where the store is (default: the environment's PHALANX_* variables).
        server: a Phalanx server's URL: submit() sends the estimator there (its source_directory as
            the code) and returns a ``RemoteRun`` (phalanx.estimators.remote) read through its API.
        token: the server's token (default: PHALANX_TOKEN, else the one `phalanx login` stored for
            that URL).
    """

    def __init__(
        self,
        name: str,
        project: str | None = None,
        *,
        settings: Settings | None = None,
        server: str | None = None,
        token: str | None = None,
    ) -> None:
        problems = []
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"name {name!r}: use letters, digits, spaces and . _ : - (at most 128)")
        if project is not None and (not isinstance(project, str) or not _NAME.match(project)):
            problems.append(f"project {project!r}: use letters, digits, spaces and . _ : - (at most 128)")
        if problems:
            raise UsageError("; ".join(problems))
        self.name = name
        self.project = project or "default"
        self._settings = settings
        self.server = None
        if server is not None:
            from phalanx.apiclient import check_url  # why: server= only: no HTTP client otherwise

            self.server = check_url(server, "server=")
        self._token = token

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings()
        return self._settings

    def submit(
        self,
        config: Estimator,
        tags: Sequence[str] = (),
        *,
        timeout: float | None = None,
        priority: int = 0,
        wait: bool = True,
    ) -> RunAPI:
        """Start ``config`` and return its Run at once (the experiment exists in the store by then):
        a ``phalanx.runs.Run`` on this machine, a ``RemoteRun`` with ``server=``; both have the
        documented Run API (``phalanx.run_api.RunAPI``: metrics, files, logs, models, register_model).

        On this machine (compute_target "local") it may first wait in the machine's queue, its status
        ``queued``, until its cores, GPUs and memory are free: ``priority`` orders the queue (higher
        first), ``wait=False`` raises UsageError instead of queueing (see docs/sharing-a-machine.md).

        ``timeout``: how long to wait for the experiment to exist (default 120 s); past it the
        supervisor is stopped and nothing runs. An environment to build (pip_packages) does not
        count: the experiment exists first, status ``building``, and the build follows.

        Raises:
            SpecError / UsageError: the estimator or the compute target cannot work (nothing started).
            PhalanxError: the supervisor could not start the experiment (its message included).
        """
        if self.server is not None and isinstance(config, HyperDriveConfig):
            raise UsageError(
                "a HyperDriveConfig with server=: sweeps run on this machine for now; submit a "
                "`kind: group` file to the server, or leave server= out"
            )
        if self.server is not None and not wait:
            raise UsageError("wait=False with server=: the server queues what it cannot start yet")
        if isinstance(config, HyperDriveConfig):  # a sweep: returns a GroupRun (estimators/sweep.py)
            return submit_sweep(config, self.name, self.project, self.settings)  # type: ignore[return-value]
        if not isinstance(config, Estimator):
            raise UsageError(
                f"submit() takes an Estimator, PyTorch or TensorFlow, got {type(config).__name__}"
            )
        tags = _tags(tags)
        if self.server is not None:
            from phalanx.estimators import remote  # why: server= only: no HTTP client, no bundle packer

            check_priority(priority, "priority")
            return remote.submit(self._client(), config, self.name, self.project, tags, priority)
        self._check_target(config.compute_target)

        check_priority(priority, "priority")
        return self._submit_here(config, tags, timeout, priority, wait)

    def _spec_text(self, config: Estimator, tags: tuple[str, ...]) -> str:
        """The experiment file the supervisor runs (kept for `phalanx rerun`/`resume`)."""
        text = config.to_yaml(name=self.name, project=self.project, tags=tags)
        if config.resume_from is not None:
            spec = config.to_spec(name=self.name, project=self.project, tags=tags)
            text = spec_to_yaml(
                replace(spec, env={**spec.env, **resume_env(config.resume_from, self.settings)})
            )
        return text

    def _submit_here(
        self, config: Estimator, tags: tuple[str, ...], timeout: float | None, priority: int, wait: bool
    ) -> Run:
        """Validate, write the run folder and start the supervisor on this machine (or its cluster)."""
        text = self._spec_text(config, tags)
        experiment_id = new_id()
        run_dir = self.settings.runs_dir / experiment_id
        spec_path = run_dir / SPEC_FILE
        # the spec the supervisor runs is validated here, as `phalanx run -f` would validate the file
        # (its mistakes raised now, nothing written); the file is kept for `phalanx rerun`/`resume`

        spec = replace(load_spec_text(text, str(spec_path)), source_file=str(spec_path))
        run_dir.mkdir(parents=True, exist_ok=True)
        spec_path.write_text(text, encoding="utf-8")

        options = LaunchOptions(
            workdir=Path(config.source_directory).resolve(),
            cluster=None if config.compute_target == "local" else config.compute_target,
            priority=priority,
            wait=wait,
            experiment_id=experiment_id,
            record=LaunchRecord(file=str(spec_path)),
        )
        # A run submitted from inside an experiment (a replica, or a script that called Task.init) is
        # its own: keep only where the store is, not the caller's identity.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_") or k in _KEEP_ENV}
        if timeout is None:  # an environment build comes after: the experiment exists, `building`
            timeout = STARTUP_TIMEOUT
        runner = Runner(self.settings)
        try:
            submitted = runner.submit(
                spec, options, env=env, cwd=Path(config.source_directory), timeout=timeout
            )
        except StartFailed as exc:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise _startup_error(exc.exit_code, exc.text) from None
        except StartTimeout as exc:
            self._abandon(exc.process, experiment_id, run_dir)
            raise
        proc = submitted.process

        (run_dir / SUBMIT_FILE).write_text(
            json.dumps({"supervisor_pid": proc.pid, "argv": proc.args, "started": time.time()}),
            encoding="utf-8",
        )
        log.info("submitted experiment %s (supervisor pid %d)", experiment_id, proc.pid)
        return Run(experiment_id, settings=self.settings, _process=proc)

    def _abandon(self, proc: ChildProcess, experiment_id: str, run_dir: Path) -> None:
        """A supervisor too slow to create its experiment: stop it rather than let it start unseen
        later, and once it has ended leave nothing behind, as the timeout error promises."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        if proc.poll() is not None:
            run = Run(experiment_id, settings=self.settings)
            if _exists(run):  # created just as the deadline passed (a slow first store open)
                _erase(run, self.settings)
            shutil.rmtree(run_dir, ignore_errors=True)

    def catalog(self) -> Catalog:
        """The data catalog where submit() runs (``Datastore.get(exp, NAME)``): the server's with
        server=URL, else this machine's."""
        from phalanx.data.remote import open_catalog  # why: SQLAlchemy only when data is named

        return open_catalog(self._client() if self.server is not None else None, self.settings)

    def _client(self) -> Any:
        """The server's API client; the token given, else PHALANX_TOKEN, else the stored login's
        (only for the URL it was stored for: a token never goes to another server)."""
        from phalanx import logins  # why: server= only: no HTTP client otherwise
        from phalanx.apiclient import Client, check_url  # why: server= only: no HTTP client otherwise

        assert self.server is not None
        token = self._token or self.settings.token
        if token is None:
            stored = logins.load(self.settings.home)
            if stored is not None and check_url(stored.url) == self.server:
                token = stored.token
        return Client(self.server, token)

    def _check_target(self, target: str) -> None:
        if target == "local":
            return

        known = load_clusters(self.settings.home)
        if target not in known:
            names = ", ".join(sorted(known)) or "none yet"
            raise UsageError(
                f"compute_target {target!r} is not a configured cluster (configured: {names}); "
                "add it with `phalanx cluster add` or use compute_target='local'"
            )


def _exists(run: Run) -> bool:
    try:
        run.refresh()
    except NotFound:
        return False
    return True


def _erase(run: Run, settings: Settings) -> None:
    """Remove an experiment whose supervisor was stopped (and has ended) before submit() saw it:
    the caller gets an error and no handle, so an experiment left behind would be one nobody
    started knowingly. Its end is recorded first by ``phalanx.reconcile`` (its supervisor is gone)."""
    store = run._store
    exp = run.refresh()
    end = decide(Facts(exp.status, asker=Asker.SUBMIT))
    if end is not None:
        record_end(store, run.id, end)
    store.delete_experiment(run.id)
    shutil.rmtree(settings.spool_dir / run.id, ignore_errors=True)


def _tags(tags: Any) -> tuple[str, ...]:
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise UsageError(f"tags: give a list of strings, e.g. tags=[{tags!r}]")
    bad = [t for t in tags if not isinstance(t, str) or not t.strip()]
    if bad:
        raise UsageError(f"tags: {bad!r} are not tags; give non-empty strings")
    return tuple(t.strip() for t in tags)


def _startup_error(code: int, text: str) -> PhalanxError:
    """The supervisor's own message (as `phalanx run` prints it) as the matching error."""
    lines = [ln for ln in text.splitlines() if ln.strip()][-20:]
    message = "\n".join(ln.removeprefix("error: ") for ln in lines) or f"exit status {code}"
    if code == 2:
        return SpecError(message) if ":" in message else UsageError(message)
    return PhalanxError(f"the experiment could not start (exit status {code}):\n{message}")


def resume_env(resume_from: str, settings: Settings) -> dict[str, str]:
    """The environment naming the checkpoint an estimator's ``resume_from`` points at: a file or
    folder path as it is, or the latest checkpoint of the experiment with that id. UsageError when
    there is none."""
    path = Path(resume_from).expanduser()
    if path.exists():
        return {ENV_RESUME: str(path.resolve())}

    store = open_store(settings)
    experiment = store.get_experiment(resume_from)  # NotFound names the id
    ckpt = latest(from_artifacts(store.artifacts(experiment.id)))
    if ckpt is None or store.artifact_store is None:
        raise UsageError(
            f"resume_from={resume_from!r}: experiment {experiment.id} has no checkpoints "
            "(task.save_checkpoint saves them)"
        )
    if store.artifact_store.local:
        local = str(store.artifact_store.url(experiment.id, ckpt.path))
    else:
        local = str(
            store.artifact_store.download(
                experiment.id, ckpt.path, settings.runs_dir / "resume" / experiment.id
            )
        )
    return {
        ENV_RESUME: local,
        ENV_RESUME_STEP: str(ckpt.step),
        "PHALANX_RESUME_METRICS": json.dumps(dict(ckpt.metrics)),
    }
