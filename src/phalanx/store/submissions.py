"""The server's submissions, as the store keeps them: durable on answer, keyed per user.

A submit is written, with its experiment (or group) row and its audit entry, in one transaction
before the server answers it (``SubmissionStore.accept``); the server's launcher starts it
afterwards and marks it ``launched``. An idempotency key belongs to the user who sent it and
carries the request's fingerprint (Stripe's rule: the same key with the same request answers the
first result; with another request it is refused); a key expires after ``KEY_TTL_SECONDS``.
Implemented by the SQL store (``sql.submissions``; migrations 0009 and 0015).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from phalanx.domain import ExperimentStatus, Replica
from phalanx.errors import Conflict

KEY_TTL_SECONDS = (
    7 * 24 * 3600.0
)  # how long an idempotency key answers its first submit (docs/server-submit.md)


class SubmissionState(enum.StrEnum):
    ACCEPTED = "accepted"  # written and answered; its supervisor (or controller) not started yet
    LAUNCHED = "launched"  # its supervisor (or group controller) was started


class SubmissionKind(enum.StrEnum):
    EXPERIMENT = "experiment"
    GROUP = "group"


@dataclass(frozen=True)
class Submission:
    """One submit: ``id`` names the experiment (or the group, ``kind``) it made."""

    id: str
    kind: SubmissionKind
    bundle_sha256: str
    submitted_at: float
    state: SubmissionState = SubmissionState.LAUNCHED
    user: str | None = None
    key: str | None = None
    fingerprint: str | None = None


@dataclass(frozen=True)
class NewExperiment:
    """The experiment row a submit writes (status ``created``: accepted, not started yet)."""

    id: str
    name: str
    project: str
    replicas: Sequence[Replica]
    framework: str | None
    backend: str
    cluster: str | None
    tags: Sequence[str]
    topology: Mapping[str, int]
    spec_text: str
    plan: Mapping[str, Any]
    status: ExperimentStatus = ExperimentStatus.CREATED


@dataclass(frozen=True)
class NewGroup:
    """The group row a submit of a `kind: group` file writes (what ``GroupStore.create_group`` takes)."""

    id: str
    name: str
    project: str
    search: str
    planned: int
    concurrency: int
    metric: str | None
    optimization: str | None
    spec_text: str
    source_file: str | None
    workdir: str | None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditEntry:
    """Who did what, written with the change it records."""

    actor: str
    action: str
    target: str
    project: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class Acceptance:
    """Everything one accepted submit writes, in one transaction."""

    submission: Submission
    record: NewExperiment | NewGroup
    audit: AuditEntry | None = None
    key_ttl: float = KEY_TTL_SECONDS  # how long its idempotency key answers (from the answer on)


def key_conflict(key: str) -> Conflict:
    """What a reuse of one's own idempotency key with another request is answered (409)."""
    return Conflict(
        f"Idempotency-Key {key!r} was used for another request (another file, params, bundle or target);"
        " a retry must send the same request: use a new key for a new submit"
    )


class SubmissionStore(Protocol):
    """What the server's control plane keeps of its submissions (the SQL store implements it)."""

    def accept(self, acceptance: Acceptance, now: float) -> tuple[Submission, bool]:
        """Write the submission, its experiment or group row, who launched it and its audit entry,
        in one transaction. Returns (the submission, True), or, when the user's idempotency key is
        held already by an unexpired submission with the same fingerprint, (that submission, False)
        and nothing is written. Raises Conflict when the key is held with another fingerprint."""
        ...

    def submission(self, submission_id: str) -> Submission | None:
        """The submission that made this experiment or group; None when it was not submitted here."""
        ...

    def submission_by_key(self, user: str, key: str, now: float) -> Submission | None:
        """The user's unexpired submission with this idempotency key, if any."""
        ...

    def submissions(self, state: SubmissionState) -> list[Submission]:
        """Every submission in ``state``, oldest first (the launcher's work list)."""
        ...

    def mark_launched(self, submission_id: str) -> None:
        """Its supervisor (or controller) was started."""
        ...

    def bundles_in_use(self, since: float) -> set[str]:
        """The sha256 of every bundle an experiment or group the store holds runs, or that a submit
        at or after ``since`` wrote (what the bundle sweeper must keep)."""
        ...
