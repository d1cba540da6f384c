"""The SQL store's tables, as SQLAlchemy Core tables: no ORM is imported (its declarative classes cost
a store-opening process about 0.2 CPU-s: docs/cli-speed.md). Their rows never leave
``phalanx.store.sql``: SqlStore maps them to domain dataclasses. Schema changes go through an
Alembic migration (a test compares the two).

Scalars are the hot table: a series (a ``series`` row per experiment/title/series, what the API and
the UI call a series) keeps its points in chunks of compressed columns keyed by its small integer id
(``scalar_chunks``, store.sql.points), so a point costs bytes, not a row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.ext.compiler import compiles

from phalanx.store.db import LEGACY_KEY

# 64-bit ids on PostgreSQL; on SQLite only INTEGER PRIMARY KEY is the (already 64-bit) rowid alias.
BIG_ID = BigInteger().with_variant(Integer, "sqlite")


class JsonText(JSON):
    """JSON whose SQLite column is declared TEXT: a column declared JSON has numeric affinity there,
    so SQLite turns a value's text that looks like a number into one (``1.0`` became the integer 1,
    ``3e5`` 300000, ``-0.0`` 0, an integer past 2**63 a rounded real). For a column that holds bare
    scalars (a parameter's value); on PostgreSQL it is JSON."""

    cache_ok = True


@compiles(JsonText, "sqlite")
def _json_text_on_sqlite(type_: JsonText, compiler: Any, **kw: Any) -> str:
    return "TEXT"


metadata = MetaData()  # every table of the store; Alembic's migrations are compared with it


ExperimentRow = Table(
    "experiments",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("project", String(255), index=True, nullable=False),
    Column("status", String(16), index=True, nullable=False),
    Column("framework", String(32)),
    Column("backend", String(32)),
    Column("cluster", String(255)),
    Column("tags", JSON, default=list, nullable=False),
    Column("topology", JSON, default=dict, nullable=False),
    Column("spec_text", Text),
    Column("plan", JSON, default=dict, nullable=False),
    Column("reason", Text),
    Column("created_at", Float, index=True, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("handle", String(255)),
    Column("group_id", String(32), index=True),  # the group it is a trial of
    # what ran: git commit/branch/diff, packages, versions, host, launch options, source snapshot
    Column("repro", JSON, nullable=True),
    Column("notes", Text),  # the user's notes (UI, `phalanx note`)
    # "training", or "service": a `phalanx serve` session (phalanx.serving.tracking)
    Column("kind", String(16), server_default="training", default="training", nullable=False),
)


ReplicaRow = Table(
    "replicas",
    metadata,
    Column("experiment_id", String(32), ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("role", String(16), nullable=False),
    Column("index", Integer, nullable=False),
    Column("rank", Integer),
    Column("state", String(16), nullable=False),
    Column("host", String(255)),
    Column("pid", Integer),
    Column("exit_code", Integer),
    Column("reason", Text),
    Column("resources", JSON, default=dict, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
)


# One (experiment, title, series): the key scalar rows point to.
SeriesRow = Table(
    "series",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", String(32), nullable=False),
    Column("title", String(255), nullable=False),
    Column("series", String(255), nullable=False),
    # the latest attempt that reported points of this series and the first step it reported: rows at
    # or after that step are that attempt's own (store.sql.attempts); NULL: none said its attempt
    Column("attempt", Integer, nullable=True),
    Column("attempt_step", BigInteger, nullable=True),
    UniqueConstraint("experiment_id", "title", "series", name="uq_series_key"),
)


# Up to a few thousand points of one series from one writer, as compressed columns
# (store.sql.points). The primary key is the only index: every read is per series.
ScalarChunkRow = Table(
    "scalar_chunks",
    metadata,
    Column("series_id", Integer, primary_key=True, autoincrement=False),
    Column("seq", Integer, primary_key=True, autoincrement=False),  # order of arrival
    Column("first_step", BigInteger, nullable=False),  # the lowest step in the chunk
    Column("last_step", BigInteger, nullable=False),  # the highest
    Column("n", Integer, nullable=False),
    Column("replica", String(64), nullable=False),
    Column("rank", Integer),
    Column("data", LargeBinary, nullable=False),
    sqlite_with_rowid=False,
)


# Per series, level and bucket of 16**level steps: what a chart needs (store.sql.summary).
ScalarSummaryRow = Table(
    "scalar_summary",
    metadata,
    # SQLite: rows clustered by (series, level, bucket), so a chart's window is one sequential read
    Column("series_id", Integer, primary_key=True, autoincrement=False),
    Column("level", Integer, primary_key=True, autoincrement=False),
    Column("bucket", BigInteger, primary_key=True, autoincrement=False),
    Column("n", BigInteger, nullable=False),
    Column("min_value", Float),
    Column("max_value", Float),
    Column("first_step", BigInteger, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("first_value", Float),
    Column("last_value", Float),
    Column("last_time", Float),
    Column("min_step", BigInteger),  # where min_value is (the first such)
    Column("max_step", BigInteger),
    Column("min_time", Float),
    Column("max_time", Float),
    sqlite_with_rowid=False,
)


# Append-only: every connect()/argparse report is a row; reads merge them per (section, key).
ParamRow = Table(
    "params",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", String(32), nullable=False),
    Column("section", String(255), nullable=False),
    Column("key", String(255), nullable=False),
    Column("value", JsonText, nullable=False),  # a bare scalar as often as not: TEXT on SQLite
    Column("replica", String(64), nullable=False),
    Column("rank", Integer),
    Column("time", Float, nullable=False),
    Index("ix_params_experiment", "experiment_id", "section", "key"),
)


ArtifactRow = Table(
    "artifacts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", String(32), nullable=False),
    Column("name", String(255), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("path", Text, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("content_type", String(128), nullable=False),
    Column("replica", String(64), nullable=False),
    Column("rank", Integer),
    Column("time", Float, nullable=False),
    Column("meta", JSON, default=dict, nullable=False),
    UniqueConstraint("experiment_id", "name", name="uq_artifacts_name"),
)


ModelRow = Table(
    "models",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", String(32), nullable=False),
    Column("name", String(255), nullable=False),
    Column("format", String(32), nullable=False),
    Column("path", Text, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("replica", String(64), nullable=False),
    Column("time", Float, nullable=False),
    Column("meta", JSON, default=dict, nullable=False),
    UniqueConstraint("experiment_id", "name", name="uq_models_name"),
)


# Console lines; ``offset`` counts lines per (experiment, replica) from 0 and never changes.
LogRow = Table(
    "logs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", String(32), nullable=False),
    Column("replica", String(64), nullable=False),
    Column("offset", Integer, nullable=False),
    Column("stream", String(16), nullable=False),
    Column("text", Text, nullable=False),
    Column("time", Float, nullable=False),
    UniqueConstraint("experiment_id", "replica", "offset", name="uq_logs_offset"),
)


TextRow = Table(
    "texts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", String(32), nullable=False),
    Column("title", String(255), nullable=False),
    Column("text", Text, nullable=False),
    Column("step", BigInteger),
    Column("replica", String(64), nullable=False),
    Column("rank", Integer),
    Column("time", Float, nullable=False),
    Column("attempt", Integer, nullable=True),  # a later one replaces its step
    Index("ix_texts_experiment", "experiment_id"),
)


# (stream, seq, experiment) of every stored event: what makes write_events idempotent.
#
# The experiment is part of the key: with (stream, seq) alone, a writer of experiment A that knew
# a stream id of experiment B could send A's records under it first and make B's later records
# count as already stored (lost). Keys stored before that have experiment ``LEGACY_KEY``.
EventKeyRow = Table(
    "event_keys",
    metadata,
    Column("stream", String(128), nullable=False),
    Column("seq", BigInteger, autoincrement=False, nullable=False),
    Column("experiment_id", String(32), server_default=LEGACY_KEY, nullable=False),
    PrimaryKeyConstraint("stream", "seq", "experiment_id", name="event_keys_pkey"),
)


# How far ingest has read each spool file (byte offset), committed with the rows it produced.
IngestPositionRow = Table(
    "ingest_positions",
    metadata,
    Column("stream", String(128), primary_key=True),
    Column("offset", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("updated_at", Float, nullable=False),
)


# An experiment group (hyperparameter search). Its controller's state lives here and in
# ``group_trials``, so a killed controller can be resumed by any process.
GroupRow = Table(
    "groups",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("project", String(255), index=True, nullable=False),
    Column("status", String(16), index=True, nullable=False),
    Column("search", String(16), nullable=False),
    Column("planned", Integer, nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("metric", String(255)),
    Column("optimization", String(16)),
    Column("spec_text", Text, nullable=False),
    Column("source_file", Text),
    Column("workdir", Text),
    Column("options", JSON, default=dict, nullable=False),  # params overrides, cluster, ...
    Column("reason", Text),
    Column("controller_pid", Integer),
    Column("controller_host", String(255)),
    Column("stop_requested", Integer, default=0, nullable=False),
    Column("created_at", Float, index=True, nullable=False),
    Column("finished_at", Float),
)


# One trial of a group: written (with its experiment id) before the experiment is launched, so
# a resumed controller neither loses nor repeats it.
TrialRow = Table(
    "group_trials",
    metadata,
    Column("group_id", String(32), ForeignKey("groups.id", ondelete="CASCADE"), primary_key=True),
    Column("number", Integer, primary_key=True, autoincrement=False),
    Column("experiment_id", String(32), nullable=False),
    Column("params", JSON, default=dict, nullable=False),
    Column("internal", JSON, default=dict, nullable=False),  # the sampler's own values
    Column("state", String(16), nullable=False),  # launching, running, done, pruned
    Column("value", Float),
    Column("step", BigInteger),
    Column("reason", Text),
    Column("created_at", Float, nullable=False),
    Column("finished_at", Float),
    UniqueConstraint("experiment_id", name="uq_group_trials_experiment"),
)


# One started group of an experiment: the first start, each restart, each `phalanx resume`.
AttemptRow = Table(
    "attempts",
    metadata,
    Column("experiment_id", String(32), ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True),
    Column("number", Integer, primary_key=True),
    Column("kind", String(16), nullable=False),  # start, restart, resume
    Column("status", String(16), nullable=False),
    Column("reason", Text),
    Column("checkpoint_step", BigInteger),  # the step it continued from
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float),
)


# Per scalar series and replica: the latest attempt of that replica that reported points and
# the first step it reported (store.sql.attempts). Per replica because on Kubernetes each pod is
# restarted on its own (the training operator, the kubelet), so replicas of one experiment may be
# at different attempts while they report into the same series.
SeriesAttemptRow = Table(
    "series_attempts",
    metadata,
    Column("series_id", Integer, primary_key=True),
    Column("replica", String(64), primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("attempt_step", BigInteger, nullable=False),
)


# How many times a replica (a pod's container) has started: the attempt number the server
# hands to each start of a pod that Kubernetes restarted by itself (``next_attempt``).
ReplicaStartRow = Table(
    "replica_starts",
    metadata,
    Column("experiment_id", String(32), ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True),
    Column("replica", String(64), primary_key=True),
    Column("last", Integer, nullable=False),
)


# A name in the model registry (phalanx.registry); its versions and aliases point to it. It
# belongs to one project (migration 0013_scoping_model_project).
RegisteredModelRow = Table(
    "registered_models",
    metadata,
    Column("name", String(100), primary_key=True),
    # the project of the experiment it was first registered from: who may read and change it
    Column("project", String(255), server_default="default", index=True, nullable=False),
    Column("description", Text),
    Column("tags", JSON, default=dict, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # the highest version number it ever had, removed ones too (migration 0020_registry_last_version):
    # the next is one more, so a number never names two files (NULL: the highest version row's)
    Column("last_version", Integer),
)


# Version N of a registered model: the registry's own copy of an experiment's ONNX file (``path``
# in the artifact store), what made it (``lineage``) and what it takes and gives (``signature``).
ModelVersionRow = Table(
    "model_versions",
    metadata,
    Column("name", String(100), ForeignKey("registered_models.name", ondelete="CASCADE"), primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("experiment_id", String(32), index=True, nullable=False),
    Column("source", String(255), nullable=False),
    Column("path", Text, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("signature", JSON, default=dict, nullable=False),
    Column("lineage", JSON, default=dict, nullable=False),
    Column("description", Text),
    Column("tags", JSON, default=dict, nullable=False),
    Column("created_at", Float, nullable=False),
)


# ``NAME@alias`` -> a version. One row per alias, so moving it is one UPDATE (atomic: a reader
# sees the old version or the new one, never none).
ModelAliasRow = Table(
    "model_aliases",
    metadata,
    Column("name", String(100), ForeignKey("registered_models.name", ondelete="CASCADE"), primary_key=True),
    Column("alias", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
)


# A named place holding data (phalanx.data): a local or NFS folder or an fsspec URL (s3://...).
# Only the URL is kept: credentials stay with the machine that reads it (AWS variables, profiles).
DatastoreRow = Table(
    "datastores",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("url", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("project", String(64), nullable=True),  # its owner (NULL: none)
    Column("shared", Integer, default=0, server_default="0", nullable=False),  # 1: every project may read
    Column("profile", String(128), nullable=True),  # the AWS profile it is read with
)


# One immutable version of a dataset: where its bytes are and the manifest that names them
# (path, size, sha256 of every file); ``digest`` (of the manifest) addresses the download cache.
DatasetVersionRow = Table(
    "dataset_versions",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("digest", String(64), index=True, nullable=False),
    Column("url", Text, nullable=False),  # the folder or file the manifest's paths are relative to
    Column("copied", Integer, default=0, nullable=False),  # 1: the bytes were copied to ``url``
    Column("files", JSON, default=list, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("file_count", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("project", String(64), nullable=True),  # its owner (NULL: none)
    Column("shared", Integer, default=0, server_default="0", nullable=False),  # 1: every project may read
)


# An experiment or group a client submitted to the server: the code bundle it runs (by
# sha256), who asked, their idempotency key with the request's fingerprint (a retried submit
# answers the same id instead of starting a second one; the same key with another body is
# refused), and how far the server got: ``accepted`` (written with its experiment or group row,
# in one transaction, before the answer) or ``launched`` (its supervisor or controller was
# started). Keys are unique per user and expire (``key_expires_at``).
SubmissionRow = Table(
    "submissions",
    metadata,
    Column("experiment_id", String(32), primary_key=True),  # or a group's id
    Column("idempotency_key", String(200)),
    Column("bundle_sha256", String(64), nullable=False),
    Column("submitted_at", Float, nullable=False),
    Column("kind", String(16), server_default="experiment", nullable=False),
    Column("user", String(200)),
    Column("fingerprint", String(64)),
    Column("key_expires_at", Float),
    Column("state", String(16), server_default="launched", nullable=False),
    UniqueConstraint("user", "idempotency_key", name="uq_submissions_user_key"),
)


# A person's local account (docs/teams.md). Only an argon2 hash of the password is kept.
UserRow = Table(
    "users",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("password_hash", Text),
    Column("is_admin", Integer, default=0, nullable=False),  # 1: a server admin (every project)
    Column("disabled", Integer, default=0, nullable=False),
    Column("created_at", Float, nullable=False),
)


# A user's named API token; only its sha256 is kept (the token is 256 random bits, so a fast
# hash is enough: nothing to brute-force), looked up on every request so revoking is immediate.
PersonalTokenRow = Table(
    "personal_tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("user", String(64), ForeignKey("users.name", ondelete="CASCADE"), nullable=False),
    Column("name", String(100), nullable=False),
    Column("token_sha256", String(64), unique=True, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float),
    UniqueConstraint("user", "name", name="uq_personal_tokens_user_name"),
)


# A project people are members of; experiments belong to it by their ``project`` name.
ProjectRow = Table(
    "projects",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("created_at", Float, nullable=False),
)


# A user's role in a project: viewer, editor or admin.
ProjectMemberRow = Table(
    "project_members",
    metadata,
    Column("project", String(255), ForeignKey("projects.name", ondelete="CASCADE"), primary_key=True),
    Column("user", String(64), ForeignKey("users.name", ondelete="CASCADE"), primary_key=True),
    Column("role", String(16), nullable=False),
)


# One thing somebody did that a team wants to answer "who did that?" for, oldest first by id.
AuditRow = Table(
    "audit_events",
    metadata,
    Column("id", BIG_ID, primary_key=True, autoincrement=True),
    Column("at", Float, index=True, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(255), nullable=False),
    Column("project", String(255)),
    Column("detail", Text),
)


# Who launched an experiment or a group (``kind`` is "experiment" or "group").
LaunchRow = Table(
    "launches",
    metadata,
    Column("kind", String(16), primary_key=True),
    Column("object_id", String(32), primary_key=True),
    Column("user", String(64), nullable=False),
    Column("at", Float, nullable=False),
)


# What one project may hold at once on one compute target (``local``: this machine's ledger),
# and how many of its experiments may wait. A NULL column is no limit. Keyed on the project's
# name, the label every experiment carries.
ProjectQuotaRow = Table(
    "project_quotas",
    metadata,
    Column("project", String(128), primary_key=True),
    Column("target", String(100), primary_key=True),
    Column("cores", Integer),
    Column("gpus", Integer),
    Column("memory_mib", Float),
    Column("max_waiting", Integer),
    Column("updated_at", Float, nullable=False),
)


# A credential a project's experiments on this machine get as an environment variable. Only
# the ciphertext is kept (Fernet, keyed by ``<home>/secrets.key``), so the database file, its
# dumps and its backups never hold the value in clear.
ProjectSecretRow = Table(
    "project_secrets",
    metadata,
    Column("project", String(128), primary_key=True),
    Column("name", String(128), primary_key=True),
    Column("ciphertext", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)


# Where a project's jobs go on a registered cluster, so the cluster accounts them to it: a
# Slurm account and partition, a Kubernetes namespace. NULL keeps the cluster's own setting.
ProjectPlacementRow = Table(
    "project_placements",
    metadata,
    Column("project", String(128), primary_key=True),
    Column("cluster", String(63), primary_key=True),
    Column("account", String(200)),
    Column("partition", String(200)),
    Column("namespace", String(63)),
    Column("updated_at", Float, nullable=False),
)
