"""What a project's alert hooks are made of (issue 43 item 5): the hook, its deliveries (each about
an experiment's or a group's end) and their attempts, the checks every door makes on a new hook.
Plain records, below the SQL store that keeps them (``sql.alerts``) and the doors that answer
``store.alerts.AlertBook``."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from phalanx.errors import UsageError
from phalanx.store.notice_kinds import NOTICES
from phalanx.tracking.labels import label_problem

# What a hook may be told about, as its ``events`` keep them: an experiment's three ends (the
# receiver's event is ``experiment.`` and the end, which ``check_hook`` also takes), what its
# supervisor notices while it lives (``store.notice_kinds``), a group's end and a registered model's
# alias pointed at another version.
EXPERIMENT_ENDS = ("failed", "succeeded", "stopped")
GROUP_FINISHED = "group.finished"
MODEL_ALIAS = "model.alias"
EVENTS = (*EXPERIMENT_ENDS, *NOTICES, GROUP_FINISHED, MODEL_ALIAS)
URL_MAX = 2000
SECRET_MIN, SECRET_MAX = 16, 256
_HOOK_ID = re.compile(r"^h[0-9a-f]{11}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # never in a URL or a secret (a database refuses NUL)
_SPACE = re.compile(r"\s")  # never in a URL (urllib refuses to send one)


@dataclass(frozen=True)
class Hook:
    """A project's webhook. ``secret`` is only ever filled for the server's deliverer and in the
    answer that created the hook; every listing leaves it out."""

    id: str
    project: str
    url: str
    events: tuple[str, ...]
    created_by: str | None
    created_at: float
    secret: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id,
            "project": self.project,
            "url": self.url,
            "events": list(self.events),
            "created_by": self.created_by,
            "created_at": self.created_at,
        }
        if self.secret is not None:
            doc["secret"] = self.secret
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Hook:
        return cls(
            id=str(doc["id"]),
            project=str(doc["project"]),
            url=str(doc["url"]),
            events=tuple(str(e) for e in doc["events"]),
            created_by=doc.get("created_by"),
            created_at=float(doc["created_at"]),
            secret=doc.get("secret"),
        )


@dataclass(frozen=True)
class Attempt:
    """One try: when, the receiver's HTTP status (None: it never answered) and why it failed."""

    number: int
    at: float
    status_code: int | None
    error: str | None


@dataclass(frozen=True)
class Delivery:
    """One event for one hook; ``state``: pending (tried again later), delivered, failed (every try
    used), dropped (its hook was removed before it was delivered). It is about an experiment
    (``experiment_id``; the ``experiment.*`` events), a group (``group_id``; ``group.finished``) or
    a registered model (``model``; ``model.alias``): exactly one of the three is set."""

    id: str
    hook_id: str
    experiment_id: str | None
    event: str
    state: str
    created_at: float
    finished_at: float | None
    attempts: tuple[Attempt, ...]
    group_id: str | None = None
    model: str | None = None

    @property
    def about(self) -> str:
        """Its subject in words: ``experiment ID``, ``group ID`` or ``model NAME``."""
        if self.group_id:
            return f"group {self.group_id}"
        return f"model {self.model}" if self.model else f"experiment {self.experiment_id}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "hook_id": self.hook_id,
            "experiment_id": self.experiment_id,
            "group_id": self.group_id,
            "model": self.model,
            "event": self.event,
            "state": self.state,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "attempts": [a.__dict__ for a in self.attempts],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Delivery:
        return cls(
            id=str(doc["id"]),
            hook_id=str(doc["hook_id"]),
            experiment_id=doc.get("experiment_id") or None,
            event=str(doc["event"]),
            state=str(doc["state"]),
            created_at=float(doc["created_at"]),
            finished_at=doc.get("finished_at"),
            attempts=tuple(Attempt(**a) for a in doc["attempts"]),
            group_id=doc.get("group_id") or None,
            model=doc.get("model") or None,
        )


@dataclass(frozen=True)
class Due:
    """A delivery the deliverer claimed: where it goes, signed with what, and its tries so far."""

    id: str
    url: str
    secret: str
    event: str
    payload: str  # the event's JSON as recorded with the end (without the server's URL)
    attempts: int


def check_hook(project: str, url: str, events: Iterable[str], secret: str | None) -> tuple[str, ...]:
    """The events, checked with the rest; UsageError naming the bad part and the fix otherwise."""
    problem = label_problem(project, "project")
    if problem:
        raise UsageError(problem)
    try:
        parts = urllib.parse.urlsplit(url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is no number, an unbalanced [
        usable = False
    if not usable or len(url) > URL_MAX or _CONTROL.search(url) or _SPACE.search(url):
        raise UsageError(
            f"url {url[:100]!r}: give the receiver's http:// or https:// address"
            " (e.g. https://hooks.example.com/phalanx; a space is written %20)"
        )
    if "@" in parts.netloc or parts.fragment:
        raise UsageError(
            f"url {shown_url(url)}: a user, password or #fragment in a hook's address would be shown to"
            " the project's viewers and sent nowhere useful; put a receiver's credential in its path or"
            " query (as Slack's incoming webhooks do), which only the project's editors see"
        )
    chosen = tuple(dict.fromkeys(_event_name(e) for e in events if e.strip()))
    wrong = [e for e in chosen if e not in EVENTS]
    if wrong or not chosen:
        raise UsageError(
            f"events {','.join(wrong) or '(none)'}: give one or more of {','.join(EVENTS)}"
            " (e.g. --on failed,stopped,group.finished,model.alias)"
        )
    if secret is not None and (not SECRET_MIN <= len(secret) <= SECRET_MAX or _CONTROL.search(secret)):
        raise UsageError(
            f"the hook's secret has {len(secret)} characters: give {SECRET_MIN} to {SECRET_MAX}"
            " printable ones (or none: the server makes one)"
        )
    return chosen


def _event_name(given: str) -> str:
    """The name a hook keeps for ``given``: the receiver's ``experiment.failed`` is ``failed`` (how
    hooks have always kept an experiment's ends; its notices, ``experiment.stalled``, likewise), any
    other name as it is."""
    name = given.strip()
    short = name.removeprefix("experiment.")
    return short if short in (*EXPERIMENT_ENDS, *NOTICES) else name


def check_hook_id(hook_id: str) -> str:
    """UsageError for what cannot be a hook id (h + 11 hex characters)."""
    if not _HOOK_ID.match(hook_id):
        raise UsageError(
            f"{hook_id[:40]!r} is not a hook id: `phalanx alert ls` lists them (e.g. h1a2b3c4d5e6)"
        )
    return hook_id


def shown_url(url: str) -> str:
    """``url`` for those who may not see where it points in full (a project's viewers, the audit
    trail, the server's log): a path or query of an incoming webhook (Slack's) is its credential,
    and so is a user or password before its host, so only the scheme, host and port are shown."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:  # stored before its checks were this strict: show nothing of it
        return "(an address that cannot be read)"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}/…"
