"""Task and Logger: the ClearML-style calls of seed 003, reporting into one Phalanx experiment.

In a replica started by `phalanx run` (PHALANX_EXPERIMENT_ID set) ``Task.init`` and
``Task.current_task`` return the experiment's task; nothing is created. In a plain
``python script.py``, ``Task.init`` creates the experiment: it sets the PHALANX_* variables so every
process the script spawns reports into the same one, starts a detached ingester, captures the
console at the file-descriptor level and records how the script ended. Standard library only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from phalanx.errors import UsageError
from phalanx.ids import new_id
from phalanx.machine.procs import record_process
from phalanx.tracking import identity as idm
from phalanx.tracking import lifecycle, series, whatran
from phalanx.tracking.client import FLUSH_TIMEOUT, Reporter, jsonable
from phalanx.tracking.console import ConsoleCapture, ExternalCapture, relay_lock_path
from phalanx.tracking.identity import Identity, launch_params
from phalanx.tracking.ingesting import spawn_ingester
from phalanx.tracking.labels import MAX_TAG, check_label
from phalanx.tracking.objects import ArtifactError, check_name, materialize, prepare
from phalanx.tracking.plots import Plots
from phalanx.tracking.reports import DebugSamples

log = logging.getLogger("phalanx.tracking")

_lock = threading.RLock()
_current: Task | None = None
_ingester: subprocess.Popen[bytes] | None = None  # kept so it is not reaped as garbage
_INGEST_DEPS = ("sqlalchemy", "alembic", "fsspec", "pydantic_settings", "phalanx.ingest")

lifecycle.patch_argparse()


class Logger(DebugSamples, Plots):
    """``task.get_logger()``: scalars and text (report calls only append to memory, about a
    microsecond; a background thread writes them), images, histograms, tables and plots
    (phalanx.tracking.reports: a file each, written to the spool by the call), and the rest of
    ClearML's reporting calls (phalanx.tracking.plots: single values, line, scatter and surface
    plots, confusion matrices, media)."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self._report_steps = {}
        self._append = task._reporter.scalars.append
        self._rank = task._reporter.rank
        self._steps: dict[tuple[str, str], int] = {}

    def report_scalar(self, title: str, series: str, value: float, iteration: int | None = None) -> None:
        if iteration is None:
            iteration = self._steps.get((title, series), -1) + 1
            self._steps[(title, series)] = iteration
        # made plain numbers now (a tensor is read at the call, not when the thread writes it); on
        # numbers already plain a type check costs about half what int() and float() do (issue 42)
        elif type(iteration) is not int:
            iteration = int(iteration)
        if type(value) is not float:
            value = float(value)
        self._append((title, series, iteration, value, time.time(), self._rank()))

    def report_scalars(self, series: str, values: Iterable[tuple[str, float]], iteration: int) -> None:
        """Several titles' values at one step, as a framework's per-step log hands them over
        (a Trainer's loss, grad norm, learning rate and epoch): one clock read and one rank look
        for all of them, so an integration called every step stays well under 1 % of it."""
        now = time.time()
        rank = self._rank()
        step = int(iteration)
        append = self._append
        # all of the call's points or none: a value that is no number refuses the call before any
        points = [(title, series, step, float(value), now, rank) for title, value in values]
        for point in points:
            append(point)

    def report_text(
        self, msg: str, level: int = logging.INFO, print_console: bool = False, *, title: str = "text",
        iteration: int | None = None,
    ) -> None:  # fmt: skip
        self._task._reporter.event(
            "text", {"title": title, "text": str(msg), "level": int(level), "step": iteration}
        )
        if print_console:
            sys.stdout.write(f"{msg}\n")

    def flush(self, wait: bool = True, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Returns once everything reported so far is in the store (see Task.flush)."""
        return self._task.flush(wait_for_uploads=wait, timeout=timeout)


class Task:
    """One experiment, seen from one process. Get it with ``Task.init`` or ``Task.current_task``."""

    def __init__(self, ident: Identity, *, owner: bool, name: str | None, project: str | None) -> None:
        self._identity = ident
        self._owner = owner
        self._owner_pid = os.getpid()
        self.name = name
        self.project = project
        self._reporter = Reporter(ident)
        self._logger: Logger | None = None
        self._console: ConsoleCapture | ExternalCapture | None = None
        self._closed = False
        self._args_enabled: bool | Mapping[str, bool] = True
        self._lifecycle = lifecycle.Lifecycle(self._finalize, self._reporter.stop_after_drain)
        self._checkpoints: list[tuple[Any, str]] = []  # (Checkpoint, path in the artifact store)
        self._whatran: threading.Thread | None = None  # a plain script's "what ran" recorder
        self._warned_unscored = False  # keep_best by a metric a checkpoint lacked: said once

    # --- getting the task ------------------------------------------------------------------------

    @classmethod
    def init(
        cls,
        project_name: str | None = None,
        task_name: str | None = None,
        tags: list[str] | None = None,
        auto_connect_arg_parser: bool | Mapping[str, bool] = True,
        capture_tensorboard: bool | None = None,
        **_ignored: Any,
    ) -> Task:
        """The experiment's task. Creates the experiment only in a main process that no launcher
        started (no PHALANX_EXPERIMENT_ID); anywhere else, returns the existing one.

        ``capture_tensorboard``: report what a ``SummaryWriter`` writes (docs/integrations.md); by
        default on unless PHALANX_CAPTURE_TENSORBOARD=0."""
        global _current
        if capture_tensorboard is not None:  # also when the task exists already (a PhalanxLogger's)
            os.environ["PHALANX_CAPTURE_TENSORBOARD"] = "1" if capture_tensorboard else "0"
            _capture_tensorboard()
        with _lock:
            if _current is not None and not _current._closed:
                return _current
            ident = Identity.from_env()
            if ident is not None:
                task = cls(ident, owner=False, name=task_name, project=project_name)
            else:
                # a name with a newline, or of hundreds of characters, broke every table and log
                # line showing it: refused here, before anything is recorded (ValueError)
                task = cls._create(
                    check_label(project_name or "default", "project"),
                    check_label(task_name or _script_name(), "name"),
                    [check_label(t, "tag", MAX_TAG) for t in _tag_list(tags)],
                )
            task._args_enabled = auto_connect_arg_parser
            task._lifecycle.install()
            _current = task
        task._record_args(lifecycle.parsed_args())
        lifecycle.on_args(task._record_args)
        _capture_tensorboard()
        return task

    @classmethod
    def current_task(cls) -> Task | None:
        """The task of this process: the one Task.init returned, or, in a replica or in a process a
        main task spawned, the experiment named by the environment. None outside any experiment."""
        global _current
        with _lock:
            if _current is not None and not _current._closed:
                return _current
            ident = Identity.from_env()
            if ident is None:
                return None
            task = cls(ident, owner=False, name=None, project=None)
            task._lifecycle.install()
            _current = task
        task._record_args(lifecycle.parsed_args())
        lifecycle.on_args(task._record_args)
        _capture_tensorboard()
        return task

    @classmethod
    def _create(cls, project: str, name: str, tags: list[str]) -> Task:
        experiment_id = new_id()
        home = idm.home()
        spool = home / "spool" / experiment_id
        os.environ.update(
            {
                idm.ENV_EXPERIMENT: experiment_id,
                idm.ENV_REPLICA: "master",
                idm.ENV_ROLE: "master",
                idm.ENV_INDEX: "0",
                idm.ENV_RANK: "0",
                idm.ENV_HOME: str(home),
                idm.ENV_SPOOL: str(spool),
            }
        )
        ident = Identity.from_env()
        assert ident is not None
        task = cls(ident, owner=True, name=name, project=project)
        task._reporter.event(
            "experiment",
            {
                "name": name,
                "project": project,
                "tags": tags,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "command": [sys.executable, *sys.argv],
            },
        )
        task._reporter.drain()  # first in the stream; kept in memory if the disk is full
        with contextlib.suppress(OSError):
            task._reporter.writer.sync()
        _record_crashes(spool)
        _record_script_process(home / "runs" / experiment_id / "script.pid")
        if whatran.enabled():
            task._whatran = whatran.start(task._reporter, cache=home / "cache")
        capture = os.environ.get(idm.ENV_CAPTURED) != "1"
        if ident.host is None:
            # the ingester also reads the console (from outside: it outlives a SIGKILLed script)
            lock = relay_lock_path(spool, os.getpid())
            external = ExternalCapture(lock) if capture else None
            pid = _start_ingester(spool, external)
            os.environ[idm.ENV_INGESTER_PID] = str(pid or 0)
            task._reporter.ingester_alive = (lambda: False) if pid is None else _popen_alive
            if external is not None and pid is not None:
                external.attach()
                task._console = external
                capture = False
                threading.Thread(
                    target=task._watch_console_reader, name="phalanx-console-watch", daemon=True
                ).start()
            elif external is not None:
                external.abandon()
        if capture:
            task._console = ConsoleCapture(task._on_console)
            task._console.start()
        os.environ[idm.ENV_CAPTURED] = "1"  # children write into our pipes: they must not capture
        return task

    # --- properties --------------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._identity.experiment_id

    @property
    def replica(self) -> str:
        return self._identity.replica

    @property
    def rank(self) -> int | None:
        return self._identity.rank()

    def get_logger(self) -> Logger:
        if self._logger is None:
            self._logger = Logger(self)
        return self._logger

    # --- reporting ---------------------------------------------------------------------------------

    def connect(self, mutable: Any, name: str | None = None) -> Any:
        """Record a dict (or argparse Namespace, or object's attributes) as hyperparameters in
        section ``name`` (default "General"); nested dicts become "a/b" keys. Returns ``mutable``.

        As in ClearML, a top-level key the experiment was launched with (a group trial's sampled
        value, a ``--param``) overrides the script's default first, in place, so a search can tune
        a value the command line never mentions."""
        launched = launch_params()
        if isinstance(mutable, MutableMapping):
            for key in mutable.keys() & launched.keys():
                mutable[key] = launched[key]
            values = dict(mutable)
        elif isinstance(mutable, Mapping):
            values = dict(mutable)
        elif hasattr(mutable, "__dict__"):
            for key in vars(mutable).keys() & launched.keys():
                setattr(mutable, key, launched[key])
            values = {k: v for k, v in vars(mutable).items() if not k.startswith("_")}
        else:
            raise TypeError(
                f"connect() takes a dict or an object with attributes, not {type(mutable).__name__}"
            )
        flat = _flatten(values)
        if flat:
            self._reporter.event("param", {"section": name or "General", "values": flat})
        return mutable

    def get_parameters(self) -> dict[str, Any]:
        """The params this experiment was launched with: declarations, ``--param`` values and, in
        a group trial, the sampled values (Polyaxon's ``get_declarations()``)."""
        return launch_params()

    def upload_artifact(
        self, name: str, artifact_object: Any, metadata: Mapping[str, Any] | None = None, **_ignored: Any
    ) -> bool:
        """Store ``artifact_object`` as artifact ``name`` of the experiment (see phalanx.tracking.objects
        for how each type is written). It is copied now; later changes to the object do not count."""
        try:
            check_name(name)
            prepared = prepare(name, artifact_object)
        except ArtifactError as exc:
            raise UsageError(str(exc)) from None
        rel, target = self._reporter.file_slot(prepared.filename)
        size = materialize(prepared, target)
        # a folder per writing process: two ranks uploading the same name never share a file (the
        # store keeps both, docs/tracking.md); the same process uploading it again replaces it
        folder = f"artifacts/{self._reporter.writer.stream}"
        path = (
            f"{folder}/{prepared.filename}"
            if prepared.source is None
            else f"{folder}/{name}/{prepared.filename}"
        )
        self._reporter.event(
            "artifact",
            {
                "name": name,
                "kind": prepared.kind,
                "path": path,
                "size": size,
                "content_type": prepared.content_type,
                "metadata": jsonable(dict(metadata or {})),
                "spool_path": rel,
            },
        )
        return True

    def save_model(self, *args: Any, **kwargs: Any) -> Any:
        """Store a trained model (weights and a checked ONNX export): see phalanx.tracking.models."""
        from phalanx.tracking.models import save_model  # why: `from phalanx import Task` stays light

        return save_model(self, *args, **kwargs)

    def save_checkpoint(
        self,
        obj_or_path: Any,
        step: int,
        metrics: Mapping[str, Any] | None = None,
        *,
        keep_last: int | None = None,
        keep_best: int | None = None,
        metric: str | None = None,
        mode: str | None = None,
    ) -> Any:
        """Store a checkpoint of ``step`` (a torch object, any picklable object, or a file/folder
        path) with its ``metrics``; durable before it returns. The retention policy (the file's
        ``run.checkpoints``, or these keywords) decides which checkpoints the store keeps. Returns a
        phalanx.checkpoints.Checkpoint. See docs/checkpoints.md."""
        from phalanx.tracking import checkpointing  # why: `from phalanx import Task` stays light

        policy = {"keep_last": keep_last, "keep_best": keep_best, "metric": metric, "mode": mode}
        return checkpointing.save(self, obj_or_path, step, metrics, **policy)

    def latest_checkpoint(self) -> Any:
        """The latest checkpoint (step, metrics, local path): the newest this process saved, else
        the one a restart or `phalanx resume` continues from; None on a fresh start."""
        from phalanx.tracking import checkpointing  # why: `from phalanx import Task` stays light

        return checkpointing.latest(self)

    def load_checkpoint(self, checkpoint: Any = None, **torch_kwargs: Any) -> Any:
        """The object saved in ``checkpoint`` (default: ``latest_checkpoint()``), or None."""
        from phalanx.tracking import checkpointing  # why: `from phalanx import Task` stays light

        return checkpointing.load(self, checkpoint, **torch_kwargs)

    def _record_model_file(self, path: str | os.PathLike[str], data: dict[str, Any]) -> None:
        """For phalanx.tracking.models: copy ``path`` into the spool and queue a MODEL event."""
        self._reporter.add_file("model", data, path)

    def flush(self, wait_for_uploads: bool = True, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Write everything reported so far to the spool (durable) and, by default, wait until it is
        visible in the store (bounded by ``timeout``). True when it is."""
        return self._reporter.flush(wait=wait_for_uploads, timeout=timeout)

    @property
    def flush_problems(self) -> list[str]:
        """Why the last ``flush()`` that returned False did: items refused (a name over 255
        characters, a step beyond 64 bits, a record the server refused). Empty when none were."""
        return list(self._reporter.last_problems)

    def close(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Flush (waiting for the store) and end the task in this process; a main script's status
        is still decided at its exit."""
        global _current
        if self._closed:
            return True
        if self._whatran is not None and self._owner and os.getpid() == self._owner_pid:
            self._whatran.join(timeout=whatran.WAIT_AT_EXIT)
        done = self._reporter.flush(wait=True, timeout=timeout)
        with _lock:
            self._closed = True
            if _current is self:
                _current = None
        return done

    # --- internals ---------------------------------------------------------------------------------

    def _record_args(self, values: Mapping[str, Any]) -> None:
        enabled = self._args_enabled
        if enabled is False or self._closed or not values:
            return
        if isinstance(enabled, Mapping):
            values = {k: v for k, v in values.items() if enabled.get(k, True)}
        if values:
            self._reporter.event("param", {"section": "Args", "values": dict(values)})

    def _watch_console_reader(self) -> None:
        """Should the ingester reading our console die while we run (killed by hand, OOM), our
        prints would break on a pipe without a reader: take the console back in-process then."""
        while isinstance(self._console, ExternalCapture) and self._console.active:
            if not _popen_alive():
                with _lock:
                    console = self._console
                    if not (isinstance(console, ExternalCapture) and console.active):
                        return
                    console.take_back(self._on_console)
                    self._console = ConsoleCapture(self._on_console)
                    self._console.start()
                    console.close_pipes()
                log.warning("phalanx: the ingester reading the console ended; capturing in-process")
                return
            time.sleep(0.5)

    def _on_console(self, stream: str, lines: list[str]) -> None:
        self._reporter.event("log", {"stream": stream, "lines": lines})

    def _finalize(self, status: str, reason: str | None) -> None:
        """At exit / SIGTERM / a multiprocessing child's end: flush; a main script's task also
        records how it ended and gives the console back."""
        main = self._owner and os.getpid() == self._owner_pid
        try:
            if main and self._console is not None:
                self._console.stop()
                if isinstance(self._console, ExternalCapture):
                    self._console.wait_relayed(_popen_alive)
            if main and self._whatran is not None and status != "stopped":
                # a short script still gets its record; a stop (SIGTERM, Ctrl-C) must not wait
                self._whatran.join(timeout=whatran.WAIT_AT_EXIT)
            if main:
                data: dict[str, Any] = {"status": status}
                if reason:
                    data["reason"] = reason
                    data["exit_code"] = 1
                self._reporter.event("status", data)
            remote = self._reporter.shipper is not None
            self._reporter.close(wait=remote, timeout=30.0)
        except Exception:
            log.exception("phalanx: flushing at exit failed")


def _after_fork() -> None:
    """A forked child has the parent's task in memory: give it its own stream and no console."""
    task = _current
    if task is not None:
        task._owner = False
        task._console = None
        task._reporter.after_fork()
        task._lifecycle.after_fork()


os.register_at_fork(after_in_child=_after_fork)


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, f"{full}/"))
        else:
            flat[full] = jsonable(value)
    return flat


def _script_name() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return Path(path).stem if path else "interactive"


def _start_ingester(spool: Path, console: ExternalCapture | None = None) -> int | None:
    """A detached `python -m phalanx.ingest` following this process, if this interpreter has what
    ingest needs; otherwise None (the spool waits for the next `phalanx` command). With
    ``console``, it also reads this process's console pipes."""
    global _ingester
    try:
        if any(importlib.util.find_spec(m) is None for m in _INGEST_DEPS):
            return None
    except (ImportError, ValueError):
        return None
    fds: tuple[int, ...] = ()
    options: list[str] = []
    if console is not None:
        fds = console.reader_fds()
        options = ["--console-fds", ",".join(map(str, fds))]
    _ingester = spawn_ingester(spool, options, pass_fds=fds, drop_env=(idm.ENV_CAPTURED,))
    return _ingester.pid


def _record_crashes(spool: Path) -> None:
    """Have Python's faulthandler write a crash (segfault, abort) of this script to the spool, where
    the reader that marks the experiment failed finds how it died (unless the program set up its
    own faulthandler)."""
    import faulthandler  # why: `from phalanx import Task` stays light

    global _fault_file
    if faulthandler.is_enabled():
        return
    try:
        spool.mkdir(parents=True, exist_ok=True)
        _fault_file = open(spool / f"fault-{os.getpid()}.txt", "w")  # noqa: SIM115 (kept open)
        faulthandler.enable(file=_fault_file, all_threads=True)
    except OSError:
        pass


_fault_file: Any = None


def _popen_alive() -> bool:
    return _ingester is not None and _ingester.poll() is None


def log_metrics(step: int | None = None, **values: float) -> None:
    """Report several scalars at once: each keyword is a title, the series is this replica's name
    (``phalanx.log_metrics(step=i, loss=0.3, acc=0.9)``). Needs a task (Task.init or a replica)."""
    task = Task.current_task()
    if task is None:
        raise UsageError(
            "phalanx.log_metrics: no experiment; call Task.init(...) first or run under `phalanx run`"
        )
    logger = task.get_logger()
    series = _own_series(task)
    for title, value in values.items():
        logger.report_scalar(title, series, value, step)


def _capture_tensorboard() -> None:
    """TensorBoard capture, on unless PHALANX_CAPTURE_TENSORBOARD says off (part of the SDK: the
    SDK copy a foreign venv gets holds it too; it imports nothing until a script imports
    TensorBoard's writer)."""
    from phalanx.tracking import tensorboard  # why: `from phalanx import Task` stays light

    if tensorboard.enabled_by_env():
        series.use(current_target)
        tensorboard.capture()
    else:
        tensorboard.stop()


def current_target() -> series.Target | None:
    """Where a captured TensorBoard point of this process goes: its task, logger and own series."""
    task = Task.current_task()
    return None if task is None else series.Target(task, task.get_logger(), _own_series(task))


def _tag_list(tags: Any) -> list[str]:
    """``tags=["a", "b"]``, or one tag as a plain string (``list("abc")`` made three tags of it)."""
    if tags is None:
        return []
    if isinstance(tags, str):
        return [tags]
    return [str(t) for t in tags]


def _own_series(task: Task) -> str:
    """The series a process's metrics go to: its replica's name, or ``rank N`` when the replica runs
    several processes (``processes_per_replica``, torchrun's ``--nproc_per_node``) or this process is
    a rank spawned from the replica's (``mp.spawn``): one series per replica would mix their points."""
    rank = task.rank
    local_world = idm._int(os.environ.get("LOCAL_WORLD_SIZE")) or 1
    if rank is not None and (local_world > 1 or rank != task._identity.replica_rank):
        return f"rank {rank}"
    return task.replica


def _record_script_process(path: Path) -> None:
    """Leave "pid start-time" where `phalanx stop` and the server look for the process to stop
    (they never trust a pid that came through ingest). A home we cannot write is no reason to fail."""
    with contextlib.suppress(OSError):
        record_process(path)
