"""One error tree for the whole product.

Every error a user can cause is a PhalanxError subclass; the CLI maps its ``code`` to an exit status
and the server to an HTTP status through the two tables below, so the same mistake answers the same
way on every surface.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a user's input, located precisely enough to fix it."""

    message: str
    path: str = ""
    file: str | None = None
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        path = f"{self.path}: " if self.path else ""
        return f"{where}{path}{self.message}"


class PhalanxError(Exception):
    """Base of every error Phalanx raises on purpose."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(PhalanxError):
    """A command or API call was given arguments that cannot work."""

    code = "usage"


class SpecError(UsageError):
    """An experiment file (or estimator) is invalid; carries every problem found, in file order."""

    code = "invalid_spec"

    def __init__(self, problems: list[Problem] | Problem | str) -> None:
        if isinstance(problems, str):
            problems = [Problem(problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class NotFound(PhalanxError):
    """The experiment, artifact, cluster or replica asked for does not exist."""

    code = "not_found"


class Conflict(PhalanxError):
    """The request clashes with the current state (e.g. deleting a running experiment)."""

    code = "conflict"


def not_resumable(experiment_id: str, status: str) -> Conflict:
    """Why an experiment cannot be resumed (the store, the supervisor and the CLI all say it)."""
    return Conflict(f"experiment {experiment_id} is {status}; only a failed or stopped one can be resumed")


class QuotaExceeded(UsageError):
    """The project already has as many experiments waiting as its quota allows (retry later)."""

    code = "quota_exceeded"


class Unauthorized(PhalanxError):
    """A token is required and was missing or wrong."""

    code = "unauthorized"


class AccountDisabled(Unauthorized):
    """The user is known (a token of theirs, or their right password) but their account is disabled."""

    code = "account_disabled"


def account_disabled(user: str) -> AccountDisabled:
    """Why a disabled user's password, token or session is refused, and who can change that."""
    return AccountDisabled(
        f"the account {user!r} is disabled on this server, so its password, tokens and sessions are refused:"
        f" ask a server admin to enable it again (`phalanx admin user enable {user}` on the server's machine)"
    )


class BackendUnavailable(PhalanxError):
    """An engine (Slurm, Kubernetes, mpirun) cannot be reached or is not installed."""

    code = "backend_unavailable"


class StoreUnavailable(BackendUnavailable):
    """The store's database cannot be reached (a supervisor waits for it, as for any outage): exit
    status 69, as a server that cannot be reached (nothing was started, and nothing failed)."""

    code = "unavailable"


class MissingExtra(UsageError):
    """A command needs an optional part of Phalanx (a pip extra) that is not installed."""

    code = "missing_extra"

    def __init__(self, extra: str, purpose: str) -> None:
        self.extra = extra
        super().__init__(
            f"{purpose} needs the optional {extra!r} part of Phalanx, which is not installed; "
            f"install it with: pip install 'phalanx[{extra}]'"
        )


class StoreError(PhalanxError):
    """The store failed in a way that is not the user's fault."""

    code = "store_error"


# Exit statuses for the CLI: 2 is the user's mistake, 1 is a failure that is not (an experiment that
# failed), 69 a server that could not be reached or cannot serve now (``phalanx.apiclient.Unavailable``:
# sysexits.h's EX_UNAVAILABLE), so a script tells "it failed" from "nobody was there to ask".
UNAVAILABLE_EXIT = 69
EXIT_STATUS: dict[str, int] = {
    "usage": 2,
    "invalid_spec": 2,
    "not_found": 2,
    "conflict": 2,
    "quota_exceeded": 2,
    "unauthorized": 2,
    "account_disabled": 2,
    "missing_extra": 2,
    "backend_unavailable": 1,
    "unavailable": UNAVAILABLE_EXIT,
    "store_error": 1,
    "error": 1,
}

# HTTP statuses for the server.
HTTP_STATUS: dict[str, int] = {
    "usage": 400,
    "invalid_spec": 422,
    "not_found": 404,
    "conflict": 409,
    "quota_exceeded": 429,  # Too Many Requests: the project's queue is full; a later submit may pass
    "unauthorized": 401,
    "account_disabled": 401,
    "missing_extra": 501,
    "backend_unavailable": 503,
    "unavailable": 503,
    "store_error": 500,
    "error": 500,
}


def exit_status(error: PhalanxError) -> int:
    return EXIT_STATUS.get(error.code, 1)


def http_status(error: PhalanxError) -> int:
    return HTTP_STATUS.get(error.code, 500)
