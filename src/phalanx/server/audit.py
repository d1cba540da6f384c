"""The audit trail: every change made through the API is recorded, by one mechanism.

``AuditMiddleware`` writes one entry for every successful mutating request (POST, PUT, PATCH,
DELETE) under ``/api/v1``, before its answer leaves: who (the request's principal), when, what (the
route's own name for the change, else its method and path template) and to which target, with
the previous value where one was replaced. A route says what its change was with ``describe``;
one that says nothing is still recorded under its method and path, so a route added later is never
left out (tests/unit/server/test_audit_trail.py walks the OpenAPI document to prove it). What is
not a change a person made is left out: a replica's (or a plain script's) records and files sent
through ingest. A refused attempt (403) is recorded too when the server was started with
``--audit-refusals`` (``ServerSettings.audit_refusals``). A submit writes its entry in the same
transaction as the experiment it creates (``server.submitting``) and marks the request audited.

A server without accounts (a store that is not SQL) keeps no trail.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from phalanx.server.policy import Principal, principal_of
from phalanx.store.accounts import Accounts

log = logging.getLogger(__name__)

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
API = "/api/v1"
# records and files a replica (or a plain script) sends: its own data, not a change to audit
NOT_CHANGES = frozenset({f"{API}/ingest", f"{API}/experiments/{{experiment_id}}/attempts/next"})
_CONVERTER = re.compile(r"\{(\w+):\w+\}")
_NOTE = "phalanx.audit"
_DONE = "phalanx.audited"


@dataclass(frozen=True)
class Note:
    action: str
    target: str
    project: str | None = None
    detail: str | None = None
    actor: str | None = None  # who, when the request's principal is nobody yet (a token issued)


def describe(
    request: Request,
    action: str,
    target: str,
    project: str | None = None,
    detail: str | None = None,
    previous: str | None = None,
    actor: str | None = None,
) -> None:
    """Name the change this request makes (``experiment.stop``, ``quota.set``): the entry the
    middleware writes once the change succeeded. ``previous``: what was replaced (a quota's old
    limits, the version an alias pointed at), never a secret's value."""
    parts = [p for p in (detail, None if previous is None else f"previous: {previous}") if p]
    request.scope[_NOTE] = Note(action, target, project, "; ".join(parts) or None, actor)


def mark_audited(request: Request) -> None:
    """The route wrote its entry itself (with the change, in one transaction)."""
    request.scope[_DONE] = True


def record_launch(request: Request, kind: str, object_id: str) -> None:
    """Who launched an experiment or group (the principal's user; the server token's name else)."""
    accounts = getattr(request.app.state, "accounts", None)
    if accounts is not None:
        accounts.record_launch(kind, object_id, principal_of(request).name)


def launched_by(request: Request, kind: str, object_id: str) -> str | None:
    accounts = getattr(request.app.state, "accounts", None)
    return None if accounts is None else accounts.launched_by(kind, object_id)


class AuditMiddleware:
    """Writes the entry of each change (see the module docstring). ``refusals``: also 403s."""

    def __init__(self, app: ASGIApp, accounts: Accounts | None, refusals: bool = False) -> None:
        self.app = app
        self.accounts = accounts
        self.refusals = refusals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.accounts is None
            or scope["type"] != "http"
            or scope["method"] not in MUTATING
            or not str(scope["path"]).startswith(API + "/")
        ):
            await self.app(scope, receive, send)
            return

        async def audited(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry = self._entry(scope, int(message["status"]))
                if entry is not None:
                    try:
                        await anyio.to_thread.run_sync(self._write, *entry)
                    except Exception as exc:  # the change is made: the log keeps what the trail missed
                        log.error("the audit trail could not record %s (%s)", entry, exc)
            await send(message)

        await self.app(scope, receive, audited)

    def _entry(self, scope: Scope, status: int) -> tuple[str, str, str, str | None, str | None] | None:
        if scope.get(_DONE):
            return None
        template = _template(scope)
        if template in NOT_CHANGES:
            return None
        who = _principal(scope)
        if who.replica_of is not None:  # a replica's own files: records, not a person's change
            return None
        if status == 403 and self.refusals:
            return who.name, "refused", f"{scope['method']} {scope['path']}"[:255], None, template
        if status >= 400:
            return None
        note = scope.get(_NOTE)
        if isinstance(note, Note):
            return note.actor or who.name, note.action, note.target, note.project, note.detail
        params = {k: str(v) for k, v in (scope.get("path_params") or {}).items()}
        target = "/".join(params.values()) or str(scope["path"])
        return who.name, f"{scope['method']} {template}", target, params.get("project"), None

    def _write(self, actor: str, action: str, target: str, project: str | None, detail: str | None) -> None:
        assert self.accounts is not None
        self.accounts.audit(actor, action, target, project, detail)


def _template(scope: Scope) -> str:
    """The route's path template as the OpenAPI document writes it
    (``/api/v1/experiments/{experiment_id}/files/{path}``), else the request's path."""
    path = getattr(scope.get("route"), "path", None)
    if not isinstance(path, str):
        return str(scope["path"])
    path = _CONVERTER.sub(r"{\1}", path)  # {path:path} -> {path}
    return path if path.startswith(API + "/") else API + path  # a router included under /api/v1


def _principal(scope: Scope) -> Principal:
    found: Any = scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else Principal(user=None, superuser=True)
