"""ORM rows of the SQL store. They never leave ``phalanx.store.sql``: SqlStore maps them to domain
dataclasses. Schema changes go through an Alembic migration (a test compares the two).

Scalars are the hot table: a series (a ``series`` row per experiment/title/series, what the API and
the UI call a series) keeps its points in chunks of compressed columns keyed by its small integer id
(``scalar_chunks``, store.sql.points), so a point costs bytes, not a row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# 64-bit ids on PostgreSQL; on SQLite only INTEGER PRIMARY KEY is the (already 64-bit) rowid alias.
BIG_ID = BigInteger().with_variant(Integer, "sqlite")


class Base(DeclarativeBase):
    pass


class ExperimentRow(Base):
    __tablename__ = "experiments"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    project: Mapped[str] = mapped_column(String(255), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    framework: Mapped[str | None] = mapped_column(String(32))
    backend: Mapped[str | None] = mapped_column(String(32))
    cluster: Mapped[str | None] = mapped_column(String(255))
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    topology: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    spec_text: Mapped[str | None] = mapped_column(Text)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    handle: Mapped[str | None] = mapped_column(String(255))
    group_id: Mapped[str | None] = mapped_column(String(32), index=True)  # the group it is a trial of
    # what ran: git commit/branch/diff, packages, versions, host, launch options, source snapshot
    repro: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    notes: Mapped[str | None] = mapped_column(Text)  # the user's notes (UI, `phalanx note`)
    # "training", or "service": a `phalanx serve` session (phalanx.serving.tracking)
    kind: Mapped[str] = mapped_column(String(16), server_default="training", default="training")


class ReplicaRow(Base):
    __tablename__ = "replicas"

    experiment_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    index: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    resources: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class SeriesRow(Base):
    """One (experiment, title, series): the key scalar rows point to."""

    __tablename__ = "series"
    __table_args__ = (UniqueConstraint("experiment_id", "title", "series", name="uq_series_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[str] = mapped_column(String(32))
    title: Mapped[str] = mapped_column(String(255))
    series: Mapped[str] = mapped_column(String(255))
    # the latest attempt that reported points of this series and the first step it reported: rows at
    # or after that step are that attempt's own (store.sql.attempts); NULL: none said its attempt
    attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)
    attempt_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class ScalarChunkRow(Base):
    """Up to a few thousand points of one series from one writer, as compressed columns
    (store.sql.points). The primary key is the only index: every read is per series."""

    __tablename__ = "scalar_chunks"
    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012 (SQLAlchemy reads it)

    series_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)  # order of arrival
    first_step: Mapped[int] = mapped_column(BigInteger)  # the lowest step in the chunk
    last_step: Mapped[int] = mapped_column(BigInteger)  # the highest
    n: Mapped[int] = mapped_column(Integer)
    replica: Mapped[str] = mapped_column(String(64))
    rank: Mapped[int | None] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class ScalarSummaryRow(Base):
    """Per series, level and bucket of 16**level steps: what a chart needs (store.sql.summary)."""

    __tablename__ = "scalar_summary"
    # SQLite: rows clustered by (series, level, bucket), so a chart's window is one sequential read
    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012 (SQLAlchemy reads it)

    series_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    level: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    n: Mapped[int] = mapped_column(BigInteger)
    min_value: Mapped[float | None] = mapped_column(Float)
    max_value: Mapped[float | None] = mapped_column(Float)
    first_step: Mapped[int] = mapped_column(BigInteger)
    last_step: Mapped[int] = mapped_column(BigInteger)
    first_value: Mapped[float | None] = mapped_column(Float)
    last_value: Mapped[float | None] = mapped_column(Float)
    last_time: Mapped[float | None] = mapped_column(Float)
    min_step: Mapped[int | None] = mapped_column(BigInteger)  # where min_value is (the first such)
    max_step: Mapped[int | None] = mapped_column(BigInteger)
    min_time: Mapped[float | None] = mapped_column(Float)
    max_time: Mapped[float | None] = mapped_column(Float)


class ParamRow(Base):
    """Append-only: every connect()/argparse report is a row; reads merge them per (section, key)."""

    __tablename__ = "params"
    __table_args__ = (Index("ix_params_experiment", "experiment_id", "section", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[str] = mapped_column(String(32))
    section: Mapped[str] = mapped_column(String(255))
    key: Mapped[str] = mapped_column(String(255))
    value: Mapped[Any] = mapped_column(JSON)
    replica: Mapped[str] = mapped_column(String(64))
    rank: Mapped[int | None] = mapped_column(Integer)
    time: Mapped[float] = mapped_column(Float)


class ArtifactRow(Base):
    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("experiment_id", "name", name="uq_artifacts_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    path: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(BigInteger)
    content_type: Mapped[str] = mapped_column(String(128))
    replica: Mapped[str] = mapped_column(String(64))
    rank: Mapped[int | None] = mapped_column(Integer)
    time: Mapped[float] = mapped_column(Float)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ModelRow(Base):
    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("experiment_id", "name", name="uq_models_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(255))
    format: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(BigInteger)
    replica: Mapped[str] = mapped_column(String(64))
    time: Mapped[float] = mapped_column(Float)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class LogRow(Base):
    """Console lines; ``offset`` counts lines per (experiment, replica) from 0 and never changes."""

    __tablename__ = "logs"
    __table_args__ = (UniqueConstraint("experiment_id", "replica", "offset", name="uq_logs_offset"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[str] = mapped_column(String(32))
    replica: Mapped[str] = mapped_column(String(64))
    offset: Mapped[int] = mapped_column(Integer)
    stream: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    time: Mapped[float] = mapped_column(Float)


class TextRow(Base):
    __tablename__ = "texts"
    __table_args__ = (Index("ix_texts_experiment", "experiment_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment_id: Mapped[str] = mapped_column(String(32))
    title: Mapped[str] = mapped_column(String(255))
    text: Mapped[str] = mapped_column(Text)
    step: Mapped[int | None] = mapped_column(BigInteger)
    replica: Mapped[str] = mapped_column(String(64))
    rank: Mapped[int | None] = mapped_column(Integer)
    time: Mapped[float] = mapped_column(Float)
    attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)  # a later one replaces its step


# experiment_id of an event key stored before migration 0006_event_key_experiment: any experiment
LEGACY_KEY = ""


class EventKeyRow(Base):
    """(stream, seq, experiment) of every stored event: what makes write_events idempotent.

    The experiment is part of the key: with (stream, seq) alone, a writer of experiment A that knew
    a stream id of experiment B could send A's records under it first and make B's later records
    count as already stored (lost). Keys stored before that have experiment ``LEGACY_KEY``."""

    __tablename__ = "event_keys"
    __table_args__ = (PrimaryKeyConstraint("stream", "seq", "experiment_id", name="event_keys_pkey"),)

    stream: Mapped[str] = mapped_column(String(128))
    seq: Mapped[int] = mapped_column(BigInteger, autoincrement=False)
    experiment_id: Mapped[str] = mapped_column(String(32), server_default=LEGACY_KEY)


class IngestPositionRow(Base):
    """How far ingest has read each spool file (byte offset), committed with the rows it produced."""

    __tablename__ = "ingest_positions"

    stream: Mapped[str] = mapped_column(String(128), primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger)
    seq: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[float] = mapped_column(Float)


class GroupRow(Base):
    """An experiment group (hyperparameter search). Its controller's state lives here and in
    ``group_trials``, so a killed controller can be resumed by any process."""

    __tablename__ = "groups"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    project: Mapped[str] = mapped_column(String(255), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    search: Mapped[str] = mapped_column(String(16))
    planned: Mapped[int] = mapped_column(Integer)
    concurrency: Mapped[int] = mapped_column(Integer)
    metric: Mapped[str | None] = mapped_column(String(255))
    optimization: Mapped[str | None] = mapped_column(String(16))
    spec_text: Mapped[str] = mapped_column(Text)
    source_file: Mapped[str | None] = mapped_column(Text)
    workdir: Mapped[str | None] = mapped_column(Text)
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # params overrides, cluster, ...
    reason: Mapped[str | None] = mapped_column(Text)
    controller_pid: Mapped[int | None] = mapped_column(Integer)
    controller_host: Mapped[str | None] = mapped_column(String(255))
    stop_requested: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    finished_at: Mapped[float | None] = mapped_column(Float)


class TrialRow(Base):
    """One trial of a group: written (with its experiment id) before the experiment is launched, so
    a resumed controller neither loses nor repeats it."""

    __tablename__ = "group_trials"
    __table_args__ = (UniqueConstraint("experiment_id", name="uq_group_trials_experiment"),)

    group_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("groups.id", ondelete="CASCADE"), primary_key=True
    )
    number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    experiment_id: Mapped[str] = mapped_column(String(32))
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    internal: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # the sampler's own values
    state: Mapped[str] = mapped_column(String(16))  # launching, running, done, pruned
    value: Mapped[float | None] = mapped_column(Float)
    step: Mapped[int | None] = mapped_column(BigInteger)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class AttemptRow(Base):
    """One started group of an experiment: the first start, each restart, each `phalanx resume`."""

    __tablename__ = "attempts"

    experiment_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # start, restart, resume
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    checkpoint_step: Mapped[int | None] = mapped_column(BigInteger)  # the step it continued from
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class SeriesAttemptRow(Base):
    """Per scalar series and replica: the latest attempt of that replica that reported points and
    the first step it reported (store.sql.attempts). Per replica because on Kubernetes each pod is
    restarted on its own (the training operator, the kubelet), so replicas of one experiment may be
    at different attempts while they report into the same series."""

    __tablename__ = "series_attempts"

    series_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    replica: Mapped[str] = mapped_column(String(64), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    attempt_step: Mapped[int] = mapped_column(BigInteger)


class ReplicaStartRow(Base):
    """How many times a replica (a pod's container) has started: the attempt number the server
    hands to each start of a pod that Kubernetes restarted by itself (``next_attempt``)."""

    __tablename__ = "replica_starts"

    experiment_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    replica: Mapped[str] = mapped_column(String(64), primary_key=True)
    last: Mapped[int] = mapped_column(Integer)


class RegisteredModelRow(Base):
    """A name in the model registry (phalanx.registry); its versions and aliases point to it. It
    belongs to one project (migration 0013_scoping_model_project)."""

    __tablename__ = "registered_models"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    # the project of the experiment it was first registered from: who may read and change it
    project: Mapped[str] = mapped_column(String(255), server_default="default", index=True)
    description: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class ModelVersionRow(Base):
    """Version N of a registered model: the registry's own copy of an experiment's ONNX file (``path``
    in the artifact store), what made it (``lineage``) and what it takes and gives (``signature``)."""

    __tablename__ = "model_versions"

    name: Mapped[str] = mapped_column(
        String(100), ForeignKey("registered_models.name", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    experiment_id: Mapped[str] = mapped_column(String(32), index=True)
    source: Mapped[str] = mapped_column(String(255))
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    signature: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    lineage: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    description: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_at: Mapped[float] = mapped_column(Float)


class ModelAliasRow(Base):
    """``NAME@alias`` -> a version. One row per alias, so moving it is one UPDATE (atomic: a reader
    sees the old version or the new one, never none)."""

    __tablename__ = "model_aliases"

    name: Mapped[str] = mapped_column(
        String(100), ForeignKey("registered_models.name", ondelete="CASCADE"), primary_key=True
    )
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(Float)


class DatastoreRow(Base):
    """A named place holding data (phalanx.data): a local or NFS folder or an fsspec URL (s3://...).
    Only the URL is kept: credentials stay with the machine that reads it (AWS variables, profiles)."""

    __tablename__ = "datastores"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class DatasetVersionRow(Base):
    """One immutable version of a dataset: where its bytes are and the manifest that names them
    (path, size, sha256 of every file); ``digest`` (of the manifest) addresses the download cache."""

    __tablename__ = "dataset_versions"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    digest: Mapped[str] = mapped_column(String(64), index=True)
    url: Mapped[str] = mapped_column(Text)  # the folder or file the manifest's paths are relative to
    copied: Mapped[int] = mapped_column(Integer, default=0)  # 1: the bytes were copied to ``url``
    files: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    size: Mapped[int] = mapped_column(BigInteger)
    file_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)


class SubmissionRow(Base):
    """An experiment or group a client submitted to the server: the code bundle it runs (by
    sha256), who asked, their idempotency key with the request's fingerprint (a retried submit
    answers the same id instead of starting a second one; the same key with another body is
    refused), and how far the server got: ``accepted`` (written with its experiment or group row,
    in one transaction, before the answer) or ``launched`` (its supervisor or controller was
    started). Keys are unique per user and expire (``key_expires_at``)."""

    __tablename__ = "submissions"
    __table_args__ = (UniqueConstraint("user", "idempotency_key", name="uq_submissions_user_key"),)

    experiment_id: Mapped[str] = mapped_column(String(32), primary_key=True)  # or a group's id
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    bundle_sha256: Mapped[str] = mapped_column(String(64))
    submitted_at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(16), server_default="experiment")
    user: Mapped[str | None] = mapped_column(String(200))
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    key_expires_at: Mapped[float | None] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16), server_default="launched")


class UserRow(Base):
    """A person's local account (docs/teams.md). Only an argon2 hash of the password is kept."""

    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    password_hash: Mapped[str | None] = mapped_column(Text)
    is_admin: Mapped[int] = mapped_column(Integer, default=0)  # 1: a server admin (every project)
    disabled: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)


class PersonalTokenRow(Base):
    """A user's named API token; only its sha256 is kept (the token is 256 random bits, so a fast
    hash is enough: nothing to brute-force), looked up on every request so revoking is immediate."""

    __tablename__ = "personal_tokens"
    __table_args__ = (UniqueConstraint("user", "name", name="uq_personal_tokens_user_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(64), ForeignKey("users.name", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float)


class ProjectRow(Base):
    """A project people are members of; experiments belong to it by their ``project`` name."""

    __tablename__ = "projects"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)


class ProjectMemberRow(Base):
    """A user's role in a project: viewer, editor or admin."""

    __tablename__ = "project_members"

    project: Mapped[str] = mapped_column(
        String(255), ForeignKey("projects.name", ondelete="CASCADE"), primary_key=True
    )
    user: Mapped[str] = mapped_column(
        String(64), ForeignKey("users.name", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[str] = mapped_column(String(16))


class AuditRow(Base):
    """One thing somebody did that a team wants to answer "who did that?" for, oldest first by id."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(BIG_ID, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(255))
    project: Mapped[str | None] = mapped_column(String(255))
    detail: Mapped[str | None] = mapped_column(Text)


class LaunchRow(Base):
    """Who launched an experiment or a group (``kind`` is "experiment" or "group")."""

    __tablename__ = "launches"

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    object_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user: Mapped[str] = mapped_column(String(64))
    at: Mapped[float] = mapped_column(Float)


class ProjectQuotaRow(Base):
    """What one project may hold at once on one compute target (``local``: this machine's ledger),
    and how many of its experiments may wait. A NULL column is no limit. Keyed on the project's
    name, the label every experiment carries."""

    __tablename__ = "project_quotas"

    project: Mapped[str] = mapped_column(String(128), primary_key=True)
    target: Mapped[str] = mapped_column(String(100), primary_key=True)
    cores: Mapped[int | None] = mapped_column(Integer)
    gpus: Mapped[int | None] = mapped_column(Integer)
    memory_mib: Mapped[float | None] = mapped_column(Float)
    max_waiting: Mapped[int | None] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(Float)


class ProjectSecretRow(Base):
    """A credential a project's experiments on this machine get as an environment variable. Only
    the ciphertext is kept (Fernet, keyed by ``<home>/secrets.key``), so the database file, its
    dumps and its backups never hold the value in clear."""

    __tablename__ = "project_secrets"

    project: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    ciphertext: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[float] = mapped_column(Float)


class ProjectPlacementRow(Base):
    """Where a project's jobs go on a registered cluster, so the cluster accounts them to it: a
    Slurm account and partition, a Kubernetes namespace. NULL keeps the cluster's own setting."""

    __tablename__ = "project_placements"

    project: Mapped[str] = mapped_column(String(128), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(63), primary_key=True)
    account: Mapped[str | None] = mapped_column(String(200))
    partition: Mapped[str | None] = mapped_column(String(200))
    namespace: Mapped[str | None] = mapped_column(String(63))
    updated_at: Mapped[float] = mapped_column(Float)
