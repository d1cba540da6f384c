"""One small HTTP client of a Phalanx server's REST API, for every door that talks to a server from
another machine: `phalanx run --server`, the read and control commands after `phalanx login`, and
``Experiment(..., server=URL)``.

Standard library only (urllib): the tracking SDK's rule, so a laptop needs no extra package to
submit. The server's error documents ({"error": code, "message": ...}) come back as the matching
``PhalanxError`` (``not_found`` -> NotFound, ``invalid_spec`` -> SpecError with its `FILE:LINE:COL`
problems, ...), so a command against a server fails with the same message and exit status as it
does locally.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from phalanx.errors import (
    AccountDisabled,
    Conflict,
    NotFound,
    PhalanxError,
    Problem,
    SpecError,
    Unauthorized,
    UsageError,
)

TIMEOUT = 120.0  # one request's socket timeout (a submit is answered once it is written: seconds)
# A submit is retried with its Idempotency-Key while the server cannot be reached or answers that it
# is unavailable (a restart, a database or disk outage), backing off up to RETRY_PAUSE_MAX seconds
# between tries, for SUBMIT_RETRY_SECONDS in all (docs/server-submit.md): the key makes a retry
# answer the first submit instead of starting a second one, so retrying never duplicates.
SUBMIT_RETRY_SECONDS = 120.0
RETRY_PAUSE_MAX = 10.0


class ServerError(PhalanxError):
    """The server answered an error that is not the user's mistake, or could not be reached."""


class Unavailable(ServerError):
    """The server could not be reached, or answered that it cannot serve now (502, 503, 504):
    a request that is safe to repeat may be tried again later (``retry_after``: its hint, seconds).
    Its own exit status (``phalanx.errors.EXIT_STATUS``): not 1, which says an experiment failed.
    ``instead``: what works without the server (the client's, e.g. "`--local` works on this
    machine"), said after the message when the command gives up, not in each "retrying" line."""

    code = "unavailable"

    def __init__(self, message: str, retry_after: float | None = None, instead: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.instead = instead

    def __str__(self) -> str:
        return f"{self.message}; {self.instead}" if self.instead else self.message

    def again(self, message: str) -> Unavailable:
        """The same outage told with ``message`` (a follower or a submit that gave up on it)."""
        return Unavailable(message, self.retry_after, self.instead)


STORED_TOKEN = "the one `phalanx login` stored"


def given_token(token_file: Path | None, env_token: str | None) -> tuple[str | None, str | None]:
    """The token a command was given (``read_token``) and where it came from, for a refusal to name
    (``Client``'s ``token_from``); (None, None) when none was given."""
    token = read_token(token_file, env_token)
    if token is None:
        return None, None
    return token, f"--token-file {token_file}" if token_file is not None else "PHALANX_TOKEN"


def read_token(token_file: Path | None, env_token: str | None) -> str | None:
    """The token in ``token_file`` (stripped), else ``env_token``; UsageError for an unreadable or
    empty file."""
    if token_file is None:
        return env_token or None
    try:
        token = token_file.read_text().strip()
    except OSError as exc:
        raise UsageError(f"--token-file {token_file}: cannot read it ({exc.strerror or exc})") from None
    if not token:
        raise UsageError(f"--token-file {token_file}: the file is empty")
    return token


def check_url(url: str, option: str = "--server") -> str:
    """``url`` without its trailing slash; UsageError when it is not an http(s) URL."""
    if not url.startswith(("http://", "https://")) or not urllib.parse.urlsplit(url).netloc:
        raise UsageError(f"{option} {url!r}: give the server's URL, e.g. http://gpu-box:8000")
    return url.rstrip("/")


class Client:
    """The API of the server at ``url`` (``/api/v1`` is added), with ``token`` as its bearer."""

    def __init__(
        self,
        url: str,
        token: str | None,
        say: Callable[[str], None] | None = None,
        *,
        instead: str | None = None,
        token_from: str | None = None,
    ) -> None:
        """``say``: where a line such as "the server is unreachable; retrying" goes (the CLI's
        stderr); None: nowhere. ``instead``: what works without this server, told when it cannot
        be reached ("`--local` works on this machine"). ``token_from``: where ``token`` came from
        ("the one `phalanx login` stored", "PHALANX_TOKEN", "--token-file F"), named when the server
        refuses it, so the user knows what to change."""
        self.url = check_url(url)
        self.token = token
        self.say = say
        self.instead = instead
        self.token_from = token_from

    def raw(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = TIMEOUT,
    ) -> tuple[int, bytes, str]:
        """(status, body, content type) of one request; errors raised as PhalanxErrors."""
        with self.open(method, path, body, headers, timeout) as resp:
            try:
                data = resp.read()
            except OSError as exc:  # the connection lost while the answer came
                raise self._unreachable(exc) from None
            return resp.status, data, resp.headers.get("Content-Type", "")

    def open(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = TIMEOUT,
    ) -> Any:
        """The answer to one request, its body not read yet (a file's bytes streamed in pieces);
        errors raised as PhalanxErrors. Close it (``with``). ``timeout``: the longest silence of
        its socket (one that builds an environment before it answers waits longer)."""
        route = path.partition("?")[0]
        if "//" in route or route.endswith("/"):  # an empty id or name: another route, or a redirect
            raise UsageError(
                f"an empty argument where {method} /api/v1{route} needs a name or id: give a non-empty one"
            )
        req = urllib.request.Request(f"{self.url}/api/v1{path}", data=body, method=method)
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as exc:
            raise self._refusal(_error(exc)) from None
        except (OSError, ValueError) as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: OSError | ValueError) -> Unavailable:
        """A connection refused, a name not resolved, a timeout: one line naming the server."""
        reason = getattr(exc, "reason", exc)  # a URLError's own socket error
        why = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
        return Unavailable(f"cannot reach the server at {self.url} ({why})", instead=self.instead)

    def _refusal(self, error: PhalanxError) -> PhalanxError:
        """The server's error, with what only this side knows: what works without the server (an
        unavailable one) and where a refused token came from."""
        if isinstance(error, Unavailable):
            return Unavailable(error.message, error.retry_after, self.instead)
        if not isinstance(error, Unauthorized) or isinstance(error, AccountDisabled):
            return error  # (a disabled account: logging in again would not help)
        if self.token is None:
            return Unauthorized(
                f"{error}: log in with `phalanx login {self.url} --token TOKEN` (or --user NAME), or set"
                " PHALANX_TOKEN, or pass --token-file"
            )
        if self.token_from == STORED_TOKEN:
            return Unauthorized(
                f"{error} (the refused token is the one `phalanx login` stored; `phalanx logout` forgets"
                " it, and commands then work on this machine)"
            )
        if self.token_from is not None:
            return Unauthorized(f"{error} (the refused token came from {self.token_from})")
        return error

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = TIMEOUT,
    ) -> tuple[int, Any]:
        status, data, _ = self.raw(method, path, body, headers, timeout)
        try:
            return status, json.loads(data or b"null")
        except ValueError:
            raise ServerError(f"the server at {self.url} answered {path} with something not JSON") from None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", _with_query(path, query))[1]

    def send(self, method: str, path: str, doc: Any = None, timeout: float = TIMEOUT) -> Any:
        """``method`` with ``doc`` as a JSON body; the answer's JSON."""
        body = None if doc is None else json.dumps(doc).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        return self.request(method, path, body, headers, timeout)[1]

    def submit(
        self,
        file: Path,
        bundle: bytes,
        params: Mapping[str, Any],
        priority: int,
        key: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """POST the experiment file ``file`` (its name, as it sits at the bundle's top) with ``bundle``."""
        text = file.read_text(encoding="utf-8-sig")
        return self.submit_text(file.name, text, bundle, params, priority, key, extra)

    def submit_text(
        self,
        file_name: str,
        file_text: str,
        bundle: bytes,
        params: Mapping[str, Any],
        priority: int,
        key: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """POST the experiment; a connection lost before the answer is retried with the same key."""
        key = key or uuid.uuid4().hex
        fields = {
            "file_name": file_name,
            "file_text": file_text,
            "params": json.dumps(dict(params)),
            "priority": str(priority),
            **(extra or {}),
        }
        body, content_type = multipart(fields, "bundle", "code.tar.gz", bundle)
        headers = {"Content-Type": content_type, "Idempotency-Key": key}
        return self._post_experiment(body, headers)

    def clone(
        self,
        origin: str,
        params: Mapping[str, Any],
        priority: int,
        *,
        attempt: int | None = None,
        extra_params: bool = False,
        latest_data: bool = False,
        key: str | None = None,
    ) -> dict[str, Any]:
        """POST ``{"from": ID, ...}``: the server reruns what ID ran with these params (the rerun
        rule of `phalanx rerun`); a connection lost before the answer is retried with the same key."""
        key = key or uuid.uuid4().hex
        doc: dict[str, Any] = {"from": origin, "params": dict(params), "priority": priority}
        if attempt is not None:
            doc["attempt"] = attempt
        if extra_params:
            doc["extra_params"] = True
        if latest_data:
            doc["latest_data"] = True
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        body = json.dumps(doc).encode()
        return self._post_experiment(body, headers)

    def _post_experiment(self, body: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
        """POST /experiments, tried again while the server is unavailable (``SUBMIT_RETRY_SECONDS``;
        the caller's Idempotency-Key makes a retry answer the first submit's id instead of
        starting another, so a lost answer is never taken for a failed submit)."""
        deadline = time.monotonic() + SUBMIT_RETRY_SECONDS
        pause = 0.5
        said = False
        while True:
            try:
                return dict(self.request("POST", "/experiments", body, headers)[1])
            except Unavailable as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    key = headers.get("Idempotency-Key")
                    raise exc.again(
                        f"{exc.message}; gave up after retrying for {SUBMIT_RETRY_SECONDS:.0f} s."
                        f" Submitting again with the same Idempotency-Key ({key}) cannot start it twice"
                    ) from None
                if not said and self.say is not None:
                    self.say(
                        f"{exc.message}; retrying for up to {SUBMIT_RETRY_SECONDS:.0f} s with the same"
                        " Idempotency-Key (a retry never starts it twice)"
                    )
                    said = True
                wait = exc.retry_after if exc.retry_after is not None else pause
                time.sleep(min(max(wait, 0.1), RETRY_PAUSE_MAX, left))
                pause = min(pause * 2, RETRY_PAUSE_MAX)

    def new_token(self, username: str, password: str, name: str, expires_days: int | None) -> str:
        """A personal API token from ``POST /tokens`` (the user's name and password)."""
        try:
            doc = self.send(
                "POST",
                "/tokens",
                {"username": username, "password": password, "name": name, "expires_days": expires_days},
            )
        except AccountDisabled:  # the right password, of a disabled account: the server said so
            raise
        except Unauthorized:  # a wrong password, or a server with one shared token guarding every route
            raise UsageError(
                f"the server at {self.url} refused {username!r} with that password; a server without "
                f"users has no passwords: log in with `phalanx login {self.url} --token TOKEN`"
            ) from None
        except NotFound:
            raise UsageError(
                f"the server at {self.url} does not hand out tokens for a user name and password "
                "(no /api/v1/tokens: a server without users); ask its admin for its token and log in "
                f"with `phalanx login {self.url} --token TOKEN`"
            ) from None
        token = doc.get("token") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token:
            raise ServerError(f"the server at {self.url} answered POST /tokens without a token")
        return token


def _with_query(path: str, query: Mapping[str, Any]) -> str:
    qs = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None}, doseq=True)
    return f"{path}?{qs}" if qs else path


def quote(part: str) -> str:
    """One path segment (an id, a title, an artifact name) as the URL needs it."""
    return urllib.parse.quote(part, safe="")


def multipart(fields: Mapping[str, str], file_field: str, file_name: str, data: bytes) -> tuple[bytes, str]:
    boundary = f"phalanx-{uuid.uuid4().hex}"
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value.encode()
            + b"\r\n"
        )
    parts.append(
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{file_name}"\r\n'
            "Content-Type: application/gzip\r\n\r\n"
        ).encode()
        + data
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


_BY_CODE: dict[str, type[PhalanxError]] = {
    "not_found": NotFound,
    "conflict": Conflict,
    "usage": UsageError,
}


def _error(exc: urllib.error.HTTPError) -> PhalanxError:
    try:
        doc = json.loads(exc.read() or b"{}")
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    message = str(doc.get("message") or doc.get("detail") or exc.reason)
    code = doc.get("error")
    if code == "invalid_spec":
        # each line is already `FILE:LINE:COL: path: message` as the server's loader wrote it
        return SpecError([Problem(line) for line in message.splitlines()])
    if code == "account_disabled":
        return AccountDisabled(message)
    if exc.code == 401:  # the server says which: no token sent, or the one sent refused
        return Unauthorized(message)
    if exc.code == 413:
        return UsageError(f"the server refused the code bundle: {message}")
    if isinstance(code, str) and code in _BY_CODE:
        return _BY_CODE[code](message)
    if exc.code == 404:
        return NotFound(message)
    if 400 <= exc.code < 500:
        return UsageError(message)
    if exc.code in (502, 503, 504):
        return Unavailable(f"the server answered {exc.code}: {message}", _retry_after(exc))
    return ServerError(f"the server answered {exc.code}: {message}")


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    """The server's Retry-After (seconds) as a number, if it gave one."""
    value = exc.headers.get("Retry-After") if exc.headers is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
