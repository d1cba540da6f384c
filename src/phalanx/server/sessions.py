"""Browser sessions that logout really ends, login throttling and bearer-token throttling.

A session cookie holds a random id; the server keeps only an HMAC of it (under the server's token,
so changing the token ends every session) with its expiry, in memory and in
``<PHALANX_HOME>/server/sessions.json`` (mode 0600) so a server restart does not log everybody
out. Logout deletes the entry: a copy of the cookie taken before is worthless afterwards. A session
also names the user who signed in (None: the server token's session, as before teams).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

SESSION_SECONDS = 7 * 24 * 3600


class Sessions:
    """Live sessions of one server token."""

    def __init__(self, token: str, path: Path | None, lifetime: float = SESSION_SECONDS) -> None:
        self._token = token.encode()
        self._path = path
        self.lifetime = lifetime
        self._lock = threading.Lock()
        self._live: dict[str, tuple[float, str | None]] = self._load()

    def _key(self, session_id: str) -> str:
        return hmac.new(self._token, f"phalanx-session-v2:{session_id}".encode(), hashlib.sha256).hexdigest()

    def _load(self) -> dict[str, tuple[float, str | None]]:
        if self._path is None:
            return {}
        try:
            data = json.loads(self._path.read_text())
            now = time.time()
            live: dict[str, tuple[float, str | None]] = {}
            for k, v in data.items():
                # a bare expiry: a session file from before teams (the server token's sessions)
                expiry, user = (float(v), None) if isinstance(v, int | float) else (float(v[0]), v[1])
                if expiry > now:
                    live[str(k)] = (expiry, None if user is None else str(user))
            return live
        except (OSError, ValueError, TypeError, AttributeError, IndexError, KeyError):
            return {}

    def _save(self) -> None:
        if self._path is None:
            return
        with contextlib.suppress(OSError):
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_name(f".{self._path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(self._live, fh)
            os.replace(tmp, self._path)

    def create(self, user: str | None = None) -> str:
        """A new session of ``user`` (None: signed in with the server token); returns the id the
        cookie carries."""
        session_id = secrets.token_urlsafe(32)
        now = time.time()
        with self._lock:
            self._live = {k: v for k, v in self._live.items() if v[0] > now}
            self._live[self._key(session_id)] = (now + self.lifetime, user)
            self._save()
        return session_id

    def lookup(self, session_id: str) -> tuple[bool, str | None]:
        """(whether the session is live, the user it signed in)."""
        if not session_id:
            return False, None
        entry = self._live.get(self._key(session_id))
        if entry is None or entry[0] <= time.time():
            return False, None
        return True, entry[1]

    def valid(self, session_id: str) -> bool:
        return self.lookup(session_id)[0]

    def end(self, session_id: str) -> None:
        with self._lock:
            if self._live.pop(self._key(session_id), None) is not None:
                self._save()


class LoginThrottle:
    """At most ``attempts`` wrong tokens per client address per ``window`` seconds; then 429 until
    the oldest failure leaves the window. Guessing a token stays impractical even for a short one."""

    def __init__(self, attempts: int = 5, window: float = 60.0) -> None:
        self.attempts = attempts
        self.window = window
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float]:
        q = self._failures.setdefault(client, deque())
        while q and q[0] <= now - self.window:
            q.popleft()
        return q

    def retry_after(self, client: str) -> int:
        """Seconds until ``client`` may try again (0: now)."""
        now = time.monotonic()
        with self._lock:
            q = self._recent(client, now)
            if len(q) < self.attempts:
                return 0
            return max(1, int(q[0] + self.window - now) + 1)

    def failed(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._recent(client, now).append(now)
            if len(self._failures) > 10_000:  # bounded memory under a spray of addresses
                # an address's failures are only dropped when it comes back: look at their age here
                self._failures = {k: v for k, v in self._failures.items() if v and v[-1] > now - self.window}


# a token Phalanx issued: a personal token (phx_ and 256 random bits) or a replica's (an HMAC)
_ISSUED = re.compile(r"^(phx_[A-Za-z0-9_-]{40,}|phx-exp\.[0-9a-f]+\.[0-9a-f]{64})$")
STRONG_TOKEN_CHARS = 32  # a server token this long (secrets.token_urlsafe(32) gives 43) is no guess


@dataclass(frozen=True)
class Throttled:
    """Why a bearer token was not checked: ``seconds`` to wait; ``per_address``: the address's
    budget for guesses at a short server token is spent (else this very token failed too often)."""

    seconds: int
    per_address: bool


class BearerThrottle:
    """Wrong ``Authorization: Bearer`` tokens, throttled per credential, not per address.

    A token that failed ``attempts`` times within ``window`` seconds is not looked up again until
    the oldest failure leaves the window (a cron job's stale token stops costing the store a lookup
    a request), and only that token waits: a valid token from the same address (a NAT, a proxy, a
    shared login node) is always checked. Per address would let one stale token lock a whole office
    out. Guessing is no concern for the tokens Phalanx issues (personal tokens are 256 random bits,
    replica tokens a 256-bit HMAC) nor for a server token of ``STRONG_TOKEN_CHARS`` or more; only a
    shorter, hand-picked server token (``server_token_guessable``) keeps a per-address budget for
    the tokens that could be guesses at it, which the server warns about at start-up.
    """

    def __init__(
        self, attempts: int = 5, window: float = 60.0, *, server_token_guessable: bool = False
    ) -> None:
        self._failures = LoginThrottle(attempts, window)
        self.guessable = server_token_guessable

    def _key(self, given: str, client: str) -> tuple[str, bool]:
        if self.guessable and not _ISSUED.match(given):
            return f"address {client}", True
        return "token " + hashlib.sha256(given.encode()).hexdigest(), False

    def retry_after(self, given: str, client: str) -> Throttled | None:
        key, per_address = self._key(given, client)
        wait = self._failures.retry_after(key)
        return Throttled(wait, per_address) if wait else None

    def failed(self, given: str, client: str) -> None:
        self._failures.failed(self._key(given, client)[0])
