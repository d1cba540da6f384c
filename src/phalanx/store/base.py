"""The Store protocol: what every layer may ask of the store, and nothing more.

One write primitive for what replicas report (``write_events``, a batch, idempotent on each event's
(stream, seq)); experiment and replica rows are written only by the supervisor (and by ingest of a
plain script's EXPERIMENT/STATUS events, and by ``phalanx stop`` when the supervisor is gone).
Searches return pages. The store owns its transactions and raises only Phalanx errors
(``phalanx.errors``), never its storage library's. ``IngestStore`` adds the exactly-once spool
ingest; ``GroupStore`` adds experiment groups (hyperparameter searches) and their trials.
Implementation: ``store.sql.SqlStore`` (SQLite by default, PostgreSQL with PHALANX_DB_URL). No
product code outside the store package names it (a test checks): callers get a store from
``open_store`` and type it with these protocols. A new method a caller needs goes on a protocol
first, documented (args, returns, raises).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Unpack

from phalanx.domain import (
    Event,
    Experiment,
    ExperimentFilter,
    ExperimentStatus,
    Group,
    GroupUpdate,
    LogLine,
    Page,
    Replica,
    ReplicaState,
    Series,
    Trial,
    TrialUpdate,
)
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.submissions import SubmissionStore

if TYPE_CHECKING:
    from pathlib import Path

    from sqlalchemy.engine import Engine


@dataclass(frozen=True)
class SeriesView:
    """One series as a chart shows it: at most about ``max_points`` points of a window, from the
    stored summary (min/max per bucket) when the window holds more; ``count``: points in all."""

    series: Series
    count: int
    downsampled: bool


@dataclass(frozen=True)
class ParamRecord:
    section: str  # "Args", "General", or a connect(name=...) section
    key: str
    value: Any
    replica: str
    rank: int | None
    time: float


def merge_params(records: Iterable[ParamRecord]) -> list[ParamRecord]:
    """Merge append-only parameter reports, given oldest first.

    Per (section, key) and writer (replica, rank) the writer's latest report counts. When every
    writer's value is the same the key reads as one record (the latest report); when they differ
    (each rank records ``--rank`` or its own seed) it reads as one record per writer, so no rank's
    value is hidden. Sorted by section, key, then rank and replica.
    """
    latest: dict[tuple[str, str], dict[tuple[str, int | None], ParamRecord]] = {}
    for p in records:
        by_writer = latest.setdefault((p.section, p.key), {})
        by_writer.pop((p.replica, p.rank), None)  # re-insert: the dict's last entry is the latest report
        by_writer[(p.replica, p.rank)] = p
    out: list[ParamRecord] = []
    for k in sorted(latest):
        reports = list(latest[k].values())
        if len({_canonical(p.value) for p in reports}) == 1:
            out.append(reports[-1])
        else:
            out.extend(sorted(reports, key=_writer_order))
    return out


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _writer_order(p: ParamRecord) -> tuple[bool, int, str]:
    return (p.rank is None, p.rank or 0, p.replica)


@dataclass(frozen=True)
class ArtifactRecord:
    name: str
    kind: str  # "json", "file", "folder", "numpy", "pandas", "image", "bytes", "text"
    path: str  # path inside the experiment's artifact folder
    size: int
    content_type: str
    replica: str
    rank: int | None
    time: float
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelRecord:
    name: str
    format: str  # "pytorch", "onnx"
    path: str
    size: int
    replica: str
    time: float
    metadata: Mapping[str, Any] = field(default_factory=dict)


class Store(Protocol):
    """What the CLI, the supervisor and the server may ask of the store.

    Every method is one transaction. Errors are Phalanx errors, never the storage library's own:
    ``NotFound`` (no such experiment or replica), ``UsageError`` (an ambiguous id prefix, a bad
    filter, a number the database cannot hold), ``Conflict`` (a clash with what is stored),
    ``BackendUnavailable`` (the database cannot be reached) and ``StoreError`` (anything else the
    storage failed at, not the caller's fault). Experiment ids may be given as a unique prefix
    (as git does) and in any case; returned objects carry the full id.

    Who writes what: an experiment's status and its replicas' states are written by its supervisor
    only (``update_experiment``, ``update_replica``). Two documented exceptions: ingest of a plain
    script's own EXPERIMENT/STATUS events (a script run by ``Task.init`` has no supervisor), and
    ``phalanx stop`` of an experiment whose supervisor is gone (``supervisor.stop_experiment``
    cancels what the engine still runs and marks it stopped, since nobody else ever would).
    """

    artifact_store: ArtifactStore | None
    """Where this store's files live (deleted with their experiment); None: the store keeps none."""

    server_url: str | None
    """The door: the URL of the Phalanx server whose API answers for this store
    (``remote_store.RemoteStore``), None for a store on this machine (what a command reads where it
    runs, on a laptop or on the server's own machine)."""

    def close(self) -> None:
        """Release connections. The store must not be used afterwards."""
        ...

    def compact(self) -> None:
        """Give the space of deleted rows back to the file system (`phalanx gc`: VACUUM, and a WAL
        checkpoint on SQLite). Returns None; a store with nothing to compact does nothing. Raises
        BackendUnavailable (the database cannot be reached or stays locked), StoreError."""
        ...

    def create_experiment(
        self,
        *,
        name: str,
        project: str,
        replicas: Sequence[Replica] = (),
        experiment_id: str | None = None,
        framework: str | None = None,
        backend: str | None = None,
        cluster: str | None = None,
        tags: Sequence[str] = (),
        topology: Mapping[str, int] | None = None,
        spec_text: str | None = None,
        plan: Mapping[str, Any] | None = None,
        status: ExperimentStatus = ExperimentStatus.CREATED,
        created_at: float | None = None,
    ) -> Experiment:
        """Create an experiment and its replica rows; returns it as stored.

        ``experiment_id``: the id to use (a new 12-hex-digit id when None). ``topology``: replicas
        per role; ``spec_text``: the experiment file as given; ``plan``: the launch plan (JSON).
        ``created_at``: when it was launched (default now; the supervisor records the experiment
        only after its engine took it, so it passes the submit time). Raises Conflict if
        ``experiment_id`` exists."""
        ...

    def resolve_id(self, experiment_id: str, projects: Sequence[str] | None = None) -> str:
        """The full id of an id or unique prefix; a prefix matches only ``projects``' experiments
        when given (what a team server's caller may see). Raises NotFound, or UsageError when the
        prefix is ambiguous or empty."""
        ...

    def get_experiment(self, experiment_id: str) -> Experiment:
        """The experiment an id or unique prefix names. Raises NotFound, UsageError (ambiguous)."""
        ...

    def list_experiments(self, query: ExperimentFilter | None = None) -> Page[Experiment]:
        """One page of experiments matching ``query`` (all, newest first, 50 a page by default);
        ``Page.total`` counts every match. Raises UsageError for an unknown ``order_by`` column or
        a negative offset/limit."""
        ...

    def update_experiment(
        self,
        experiment_id: str,
        *,
        status: ExperimentStatus | None = None,
        reason: str | None = None,
        started_at: float | None = None,
        finished_at: float | None = None,
        handle: str | None = None,
        cluster: str | None = None,
        plan: Mapping[str, Any] | None = None,
    ) -> Experiment:
        """Set the fields given (None leaves a field as it is); returns the experiment after.
        Only the supervisor calls this (see the class docstring for the exceptions). ``handle``:
        the engine's handle of the submitted job; ``plan``: the plan and launch it runs, written
        once its supervisor has prepared it (a row the server recorded at submit had only the
        plan). Raises NotFound, UsageError (ambiguous id)."""
        ...

    def delete_experiment(self, experiment_id: str) -> None:
        """Remove the experiment, everything reported for it, and its files. Raises NotFound, and
        Conflict while it is starting or running (stop it first)."""
        ...

    def list_replicas(self, experiment_id: str) -> list[Replica]:
        """Its replicas, master first, then workers, then parameter servers, each by index.
        Raises NotFound."""
        ...

    def add_replicas(self, experiment_id: str, replicas: Sequence[Replica]) -> None:
        """Add replica rows to an existing experiment (a plain script's process joining late).
        Raises NotFound, and Conflict if one of the names exists."""
        ...

    def update_replica(
        self,
        experiment_id: str,
        name: str,
        *,
        state: ReplicaState | None = None,
        host: str | None = None,
        pid: int | None = None,
        exit_code: int | None = None,
        reason: str | None = None,
        started_at: float | None = None,
        finished_at: float | None = None,
        fresh: bool = False,
    ) -> None:
        """Set the fields given on replica ``name`` (None leaves a field as it is; ``fresh``: the
        first write of a new attempt, which also clears the exit code, reason and end the previous
        attempt left). Only the supervisor calls this. Raises NotFound (no such experiment, or no
        such replica)."""
        ...

    def write_events(self, events: Sequence[Event]) -> int:
        """Store a batch of what replicas reported in one transaction; events whose (stream, seq)
        is stored already are skipped, so re-sending a batch is harmless. Returns how many were new.
        A STATUS or EXPERIMENT event is applied only to a plain script's experiment. Raises
        UsageError when a value cannot be stored (an integer beyond 64 bits), StoreError when the
        write keeps clashing with other writers."""
        ...

    def last_points(self, experiment_id: str, title: str, n: int) -> dict[str, Series]:
        """series -> its last ``n`` points by step, oldest first (the pace of each rank in
        phalanx.stragglers reads only these). Returns {} for a title nobody reported. Raises
        NotFound."""
        ...

    def series_replicas(self, experiment_id: str, title: str) -> dict[str, str]:
        """series -> the replica that reported its latest point: series are named by the user
        (``rank 1``, ``gpu-0``), so a per-replica view (pace, stalls) maps them back through this.
        Raises NotFound."""
        ...

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]:
        """Chart title -> its series names, both sorted. Raises NotFound."""
        ...

    def metrics(
        self, experiment_id: str, title: str | None = None, series: str | None = None
    ) -> dict[str, dict[str, Series]]:
        """Title -> series -> points ordered by step, optionally only one title and/or series
        (a series with no point is left out). Raises NotFound."""
        ...

    def metric_view(
        self,
        experiment_id: str,
        title: str,
        *,
        series: str | None = None,
        x: str = "step",
        x_min: float | None = None,
        x_max: float | None = None,
        max_points: int = 1000,
    ) -> dict[str, SeriesView]:
        """series -> what a chart of ``max_points`` needs in the window: reads the multi-resolution
        summary, never more raw points than ``max_points`` (charts of millions of points)."""
        ...

    def experiment_columns(self, ids: Sequence[str], columns: Sequence[str]) -> dict[str, dict[str, Any]]:
        """id -> column -> value for the run table: ``param:KEY`` and ``metric:AGG:TITLE`` columns
        (AGG last/min/max, from the summary: never the points). Missing values are absent; unknown
        ids are left out. Raises UsageError for a malformed column name."""
        ...

    def params_of(self, ids: Sequence[str]) -> dict[str, list[ParamRecord]]:
        """``params`` of many experiments (full ids) in one read: id -> its merged records; an
        unknown id maps to none. Compare of 100 runs asks once, not 100 times."""
        ...

    def metric_titles_of(self, ids: Sequence[str]) -> dict[str, dict[str, list[str]]]:
        """``metric_titles`` of many experiments (full ids) in one read; an unknown id: {}."""
        ...

    def metric_views(
        self,
        ids: Sequence[str],
        title: str,
        *,
        x: str = "step",
        x_min: float | None = None,
        x_max: float | None = None,
        max_points: int = 1000,
    ) -> dict[str, dict[str, SeriesView]]:
        """``metric_view`` of one title for many experiments (full ids) on one connection: id ->
        series -> its view, as ``metric_view`` answers each; experiments without the title are
        left out. Compare's one request per title reads it."""
        ...

    def column_names(self, projects: Sequence[str] | None = None) -> dict[str, list[str]]:
        """{"params": keys, "metrics": titles} that experiments reported (the column chooser); only
        those of ``projects``' experiments when given (a team server's caller).
        Returns empty lists in an empty store; raises nothing of its own."""
        ...

    def annotate(
        self, experiment_id: str, *, tags: Sequence[str] | None = None, notes: str | None = None
    ) -> Experiment:
        """Replace the tags and/or the notes the user keeps on an experiment (None: unchanged);
        returns the experiment as it now is. Raises NotFound."""
        ...

    def params(self, experiment_id: str) -> list[ParamRecord]:
        """Hyperparameters, merged as ``merge_params`` says. Raises NotFound."""
        ...

    def artifacts(self, experiment_id: str) -> list[ArtifactRecord]:
        """Artifacts by name (their bytes are in ``artifact_store`` at ``path``). Raises NotFound."""
        ...

    def models(self, experiment_id: str) -> list[ModelRecord]:
        """Saved models by name (bytes in ``artifact_store`` at ``path``). Raises NotFound."""
        ...

    def logs(
        self,
        experiment_id: str,
        replica: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        from_end: bool = False,
    ) -> list[LogLine]:
        """Console lines in order, at most ``limit``. With ``replica``: that replica's lines from
        its line ``offset`` on. Without: every replica's lines by time, skipping ``offset`` lines.
        ``from_end``: counted from the last line instead (offset 0: the last ``limit`` lines; then
        offset = how many were read, for the page before), so a finished console opens at its tail.
        Raises NotFound."""
        ...

    def texts(self, experiment_id: str) -> list[dict[str, Any]]:
        """``report_text()`` entries in order, each with title, text, step, replica, rank and time.
        Raises NotFound."""
        ...

    # -- attempts and reproducibility (docs/checkpoints.md) -------------------------------------
    def add_attempt(
        self,
        experiment_id: str,
        *,
        kind: str,
        checkpoint_step: int | None = None,
        started_at: float | None = None,
    ) -> int:
        """Record a started group of replicas (``kind``: start, restart, resume), continuing from
        ``checkpoint_step`` when given; returns its number (1, 2, ...). Raises NotFound."""
        ...

    def finish_attempt(
        self, experiment_id: str, number: int, *, status: ExperimentStatus, reason: str | None = None
    ) -> None:
        """Record how attempt ``number`` ended. Returns None. Raises NotFound."""
        ...

    def next_attempt(self, experiment_id: str, replica: str, at_least: int = 0) -> int:
        """A new start of ``replica`` (a pod Kubernetes restarted): its PHALANX_ATTEMPT, one more
        than the replica's last start and at least ``at_least``. Raises NotFound."""
        ...

    def replica_starts(self, experiment_id: str) -> dict[str, int]:
        """The attempt ``next_attempt`` last handed to each replica (pods that Kubernetes or the
        training operator restarted by themselves): {replica: attempt}. Returns {} for an
        experiment none of whose pods asked (every engine but Kubernetes). Raises NotFound."""
        ...

    def attempts(self, experiment_id: str) -> list[dict[str, Any]]:
        """Attempts in order: number, kind, status, reason, checkpoint_step, started_at, finished_at.
        Returns [] for an experiment without any. Raises NotFound."""
        ...

    def reopen_experiment(self, experiment_id: str) -> Experiment:
        """A failed or stopped experiment starts again (`phalanx resume`); returns it as it now is.
        Raises NotFound, or Conflict when it is not failed or stopped."""
        ...

    def set_repro(self, experiment_id: str, repro: Mapping[str, Any]) -> None:
        """Record what ran (git, packages, versions, host, launch, snapshot). Returns None. Raises
        NotFound."""
        ...

    def repro(self, experiment_id: str) -> dict[str, Any]:
        """What ``set_repro`` recorded; {} when nothing was. Raises NotFound."""
        ...

    def download_artifact(self, experiment_id: str, artifact: ArtifactRecord, directory: Path) -> Path:
        """Copy ``artifact`` (a file, or a folder with its files) into ``directory`` of this
        machine, under its own name; returns where it landed. Raises StoreError when the store
        keeps no artifacts, NotFound when it holds no such file."""
        ...

    def run_details(self, experiment_id: str) -> dict[str, Any]:
        """Its attempts (with what each ran), what ran (git, versions, host, launch, snapshot) and
        each rank's pace (``store.details``): what `phalanx get` shows and the API's
        ``/experiments/ID/run`` answers, on either door. Raises NotFound."""
        ...


class IngestStore(Store, Protocol):
    """A store that spool files can be ingested into exactly once (``phalanx.ingest.Ingester``):
    the position read in each spool file is committed in the same transaction as its events, so a
    crash anywhere neither loses nor repeats a record. ``open_store`` returns one."""

    def ingest_position(self, stream: str) -> tuple[int, int]:
        """(byte offset, last seq) committed for spool file ``stream``; (0, -1) if none yet."""
        ...

    def ingest_batch(
        self, stream: str, start: int, end: int, last_seq: int, events: Sequence[Event]
    ) -> int | None:
        """Write ``events``, read from spool file ``stream`` between byte offsets ``start`` and
        ``end``, and move its committed position to (``end``, ``last_seq``), in one transaction.
        Returns how many events were new, or None (nothing written) when the committed offset is
        no longer ``start`` (another ingester got there first: re-read the position). Raises what
        ``write_events`` raises."""
        ...

    def notice(self, experiment_id: str, kind: str, replica: str | None, text: str) -> None:
        """What the supervisor noticed (``kind``: ``stalled``, ``straggling`` or ``waiting``; of
        ``replica``, or None): the project's alert hooks told about it get one ``experiment.KIND``
        delivery, and a stall's ``text`` becomes the experiment's reason, in one transaction.
        Raises NotFound, UsageError for another kind."""
        ...


class GroupStore(Store, Protocol):
    """A store that also keeps experiment groups (``phalanx group``, hyperparameter searches) and
    their trials: what the group controller, the CLI, the server and the UI ask of it. A separate
    protocol, not part of ``Store``: the server's door (``RemoteStore``) keeps none of its own; a
    caller that needs groups is typed with it (``LocalStore`` has it).

    The controller records a trial, with the experiment id it is about to launch, before launching
    it (``add_trial``): a controller killed at any point is resumed without losing or repeating a
    trial. Group ids, like experiment ids, may be given as a unique prefix where the docstring says
    so; other methods take the full id (``Group.id``). Errors are those of ``Store``.
    """

    def create_group(
        self,
        *,
        name: str,
        project: str,
        search: str,
        planned: int,
        concurrency: int,
        metric: str | None,
        optimization: str | None,
        spec_text: str,
        source_file: str | None,
        workdir: str | None,
        options: Mapping[str, Any],
    ) -> Group:
        """Record a new group (status ``created``, a new 12-hex-digit id); returns it as stored.
        ``search``: the algorithm (grid, random, ...); ``planned``: how many trials at most;
        ``concurrency``: how many run at once; ``metric``/``optimization``: what the best trial
        minimizes or maximizes (None: no metric); ``spec_text``: the group file as given;
        ``source_file``/``workdir``: where it was read and runs from; ``options``: the controller's
        settings (JSON). Returns the group as stored. Raises UsageError for a value the database
        cannot hold."""
        ...

    def resolve_group(self, group_id: str, projects: Sequence[str] | None = None) -> str:
        """Returns the full id of a group id or unique prefix (any case, spaces around ignored),
        among ``projects``' groups when given (what a team server's caller may see).
        Raises NotFound (no such group, or an empty id), UsageError (an ambiguous prefix)."""
        ...

    def get_group(self, group_id: str) -> Group:
        """Returns the group an id or unique prefix names. Raises NotFound, UsageError (ambiguous)."""
        ...

    def list_groups(self, limit: int = 50, projects: Sequence[str] | None = None) -> list[Group]:
        """Returns the newest ``limit`` groups (of ``projects`` when given), newest first; [] in a
        store without any. Raises nothing of its own."""
        ...

    def update_group(self, group_id: str, **values: Unpack[GroupUpdate]) -> None:
        """Set the fields given (``GroupUpdate``: a key given is written, None included) on group
        ``group_id`` (the full id). Returns None. Raises no error for a group that does not exist
        (it is left alone: the controller and ``group stop`` may race a ``remove_group``); Raises
        UsageError for a value the database cannot hold."""
        ...

    def remove_group(self, group_id: str) -> list[str]:
        """Delete an ended group with its trials' experiments, all or nothing; returns their ids.
        Raises NotFound, Conflict while the group or one of its experiments runs."""
        ...

    def add_trial(self, trial: Trial) -> None:
        """Record ``trial`` (its ``created_at`` is set to now, ``finished_at`` to None) before its
        experiment is launched, its experiment id fixed here. Returns None. Raises Conflict when
        the group already has a trial with this number, or another trial has this experiment id."""
        ...

    def update_trial(self, group_id: str, number: int, **values: Unpack[TrialUpdate]) -> None:
        """Set the fields given (``TrialUpdate``: a key given is written, None included) on trial
        ``number`` of group ``group_id`` (the full id). Returns None. Raises nothing of its own (an
        unknown trial is a no-op), UsageError for a value the database cannot hold."""
        ...

    def list_trials(self, group_id: str) -> list[Trial]:
        """Returns the trials of group ``group_id`` (the full id) by number; [] for a group without
        any (or an unknown id). Raises nothing of its own."""
        ...

    def count_trials(self, group_id: str) -> int:
        """Returns how many trials group ``group_id`` (the full id) has recorded (started); 0 for
        an unknown id. Raises nothing of its own."""
        ...

    def group_view(self, group_id: str) -> dict[str, Any]:
        """Returns `group get -o json` (``store.group_views``). Raises NotFound for an unknown id."""
        ...

    def group_views(self, limit: int = 50, projects: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Returns `group ls -o json`, newest first. Raises nothing of its own."""
        ...

    def link_experiment(self, experiment_id: str, group_id: str) -> None:
        """Mark experiment ``experiment_id`` as a trial of group ``group_id`` (both full ids), so
        ``ExperimentFilter(group_id=...)`` (``phalanx ls --group``, the API) finds it. Returns None.
        Raises nothing of its own (an experiment that does not exist yet is left alone)."""
        ...


class LocalStore(IngestStore, GroupStore, SubmissionStore, Protocol):
    """This machine's store (SQLite, or PostgreSQL with PHALANX_DB_URL) with every capability:
    what ``open_store`` returns and what the server runs on (its submissions included). The tables
    beside the experiments' (users and projects, secrets, quotas, placements, the registry, the
    data catalog, alert deliveries) are read and written through ``engine`` by the store package's
    modules (``store.accounts``, ``store.secrets``, ...), each handed this store."""

    engine: Engine  # the database: SQLite under the home, or PostgreSQL (PHALANX_DB_URL)
