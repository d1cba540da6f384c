"""`phalanx run -f FILE --server URL`: send the experiment to a Phalanx server, and follow it there.

The experiment's folder (the file's folder) goes as a code bundle (``phalanx.bundles``: the same
skips and cap as a Kubernetes bundle), with the file's text, the `--param` overrides and the
priority, as one multipart POST with an idempotency key, so a submit retried after a timeout never
makes a second experiment. Following reads each replica's console through the logs API, by offset,
and ends with the experiment's status as a local run does. Standard library HTTP only.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phalanx.errors import PhalanxError, Problem, SpecError, Unauthorized, UsageError

TIMEOUT = 120.0  # the server answers once the supervisor has created the experiment (2 shared cores)
RETRIES = 3
POLL_SECONDS = 0.5


class ServerError(PhalanxError):
    """The server answered an error that is not the user's mistake, or could not be reached."""


def read_token(token_file: Path | None, env_token: str | None) -> str | None:
    if token_file is None:
        return env_token or None
    try:
        token = token_file.read_text().strip()
    except OSError as exc:
        raise UsageError(f"--token-file {token_file}: cannot read it ({exc.strerror or exc})") from None
    if not token:
        raise UsageError(f"--token-file {token_file}: the file is empty")
    return token


class Client:
    def __init__(self, url: str, token: str | None) -> None:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--server {url!r}: give the server's URL, e.g. http://gpu-box:8000")
        self.url = url.rstrip("/")
        self.token = token

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        req = urllib.request.Request(f"{self.url}/api/v1{path}", data=body, method=method)
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise _error(exc) from None
        except (OSError, ValueError) as exc:
            raise ServerError(f"cannot reach the server at {self.url} ({exc})") from None

    def get(self, path: str, **query: Any) -> Any:
        qs = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        return self.request("GET", f"{path}?{qs}" if qs else path)[1]

    def submit(
        self, file: Path, bundle: bytes, params: Mapping[str, Any], priority: int, key: str | None = None
    ) -> dict[str, Any]:
        """POST the experiment; a connection lost before the answer is retried with the same key."""
        key = key or uuid.uuid4().hex
        fields = {
            "file_name": file.name,
            "file_text": file.read_text(encoding="utf-8-sig"),
            "params": json.dumps(dict(params)),
            "priority": str(priority),
        }
        body, content_type = multipart(fields, "bundle", "code.tar.gz", bundle)
        headers = {"Content-Type": content_type, "Idempotency-Key": key}
        for attempt in range(RETRIES):
            try:
                return dict(self.request("POST", "/experiments", body, headers)[1])
            except ServerError:
                if attempt == RETRIES - 1:
                    raise
                time.sleep(1 + attempt)
        raise AssertionError("unreachable")

    def clone(
        self,
        origin: str,
        params: Mapping[str, Any],
        priority: int,
        *,
        attempt: int | None = None,
        extra_params: bool = False,
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
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        body = json.dumps(doc).encode()
        for retry in range(RETRIES):
            try:
                return dict(self.request("POST", "/experiments", body, headers)[1])
            except ServerError:
                if retry == RETRIES - 1:
                    raise
                time.sleep(1 + retry)
        raise AssertionError("unreachable")


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


def _error(exc: urllib.error.HTTPError) -> PhalanxError:
    try:
        doc = json.loads(exc.read() or b"{}")
    except ValueError:
        doc = {}
    message = str(doc.get("message") or exc.reason)
    code = doc.get("error")
    if code == "invalid_spec":
        return SpecError([_problem(line) for line in message.splitlines()])
    if exc.code == 401:
        return Unauthorized(f"{message}: set PHALANX_TOKEN or pass --token-file with the server's token")
    if exc.code == 413:
        return UsageError(f"the server refused the code bundle: {message}")
    if 400 <= exc.code < 500:
        return UsageError(message)
    return ServerError(f"the server answered {exc.code}: {message}")


def _problem(line: str) -> Problem:
    return Problem(line)  # already `FILE:LINE:COL: path: message` as the server's loader wrote it


# -- following ------------------------------------------------------------------------------------
def follow(client: Client, experiment_id: str, out: Any = None) -> int:
    """Print every replica's console as it comes until the experiment ends; its exit status (0
    succeeded, 1 failed, 130 stopped). Ctrl-C is the caller's: it detaches."""
    out = out or sys.stdout
    offsets: dict[str, int] = {}
    while True:
        exp = client.get(f"/experiments/{experiment_id}")
        done = exp["status"] in ("succeeded", "failed", "stopped")
        for replica in exp.get("replicas") or []:
            _print_new(client, experiment_id, replica["name"], offsets, out)
        if done:
            return _ended(exp, out)
        time.sleep(POLL_SECONDS)


def follow_group(client: Client, group_id: str, out: Any = None) -> int:
    """Say each trial's state as it changes until the group ends; the exit status of `phalanx
    group run` (0 finished, 1 every trial failed, 130 stopped)."""
    out = out or sys.stderr
    said: dict[str, str] = {}
    while True:
        group = client.get(f"/groups/{group_id}")
        for trial in group.get("trials") or []:
            key, state = str(trial.get("number")), str(trial.get("state"))
            if said.get(key) != state:
                said[key] = state
                out.write(f"phalanx: trial {key} ({trial.get('experiment_id')}): {state}\n")
        if group.get("status") in ("succeeded", "failed", "stopped"):
            out.write(f"phalanx: group {group_id} {group['status']}\n")
            return {"succeeded": 0, "stopped": 130}.get(str(group["status"]), 1)
        time.sleep(POLL_SECONDS)


def _print_new(client: Client, experiment_id: str, replica: str, offsets: dict[str, int], out: Any) -> None:
    while True:
        page = client.get(
            f"/experiments/{experiment_id}/logs", replica=replica, offset=offsets.get(replica, 0), limit=1000
        )
        for line in page["lines"]:
            out.write(f"[{line['replica']}] {line['text']}\n")
        out.flush()
        offsets[replica] = int(page["next_offset"])
        if len(page["lines"]) < 1000:
            return


def _ended(exp: Mapping[str, Any], out: Any) -> int:
    status = exp["status"]
    if status == "succeeded":
        sys.stderr.write(f"phalanx: experiment {exp['id']} succeeded\n")
        return 0
    if status == "stopped":
        sys.stderr.write(f"phalanx: experiment {exp['id']} stopped\n")
        return 130
    failed = [r for r in exp.get("replicas") or [] if r["state"] == "failed"]
    named = ", ".join(
        f"{r['name']} (exit code {r['exit_code']})" if r.get("exit_code") is not None else r["name"]
        for r in failed
    )
    why = f": {exp['reason']}" if exp.get("reason") else ""
    sys.stderr.write(
        f"phalanx: experiment {exp['id']} failed{why}"
        + (f"; failed replicas: {named}" if named else "")
        + "\n"
    )
    return 1
