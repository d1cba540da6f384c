"""Writing the audit trail from a request: who (the request's principal) did what to which target.
A server without accounts (a store that is not SQL) keeps no trail."""

from __future__ import annotations

from fastapi import Request

from phalanx.server.policy import principal_of


def audit(
    request: Request, action: str, target: str, project: str | None = None, detail: str | None = None
) -> None:
    accounts = getattr(request.app.state, "accounts", None)
    if accounts is not None:
        accounts.audit(principal_of(request).name, action, target, project, detail)


def record_launch(request: Request, kind: str, object_id: str) -> None:
    """Who launched an experiment or group (the principal's user; the server token's name else)."""
    accounts = getattr(request.app.state, "accounts", None)
    if accounts is not None:
        accounts.record_launch(kind, object_id, principal_of(request).name)


def launched_by(request: Request, kind: str, object_id: str) -> str | None:
    accounts = getattr(request.app.state, "accounts", None)
    return None if accounts is None else accounts.launched_by(kind, object_id)
