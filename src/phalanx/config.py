"""Where Phalanx keeps its state, read from the environment (PHALANX_HOME, PHALANX_DB_URL, ...).

Passed explicitly into the store, the supervisor and the server: no module-level globals.

A plain class rather than pydantic-settings: every CLI command builds one first, and importing
pydantic-settings cost 0.2 CPU-s of each `phalanx ls` (issue 30, docs/cli-speed.md). It keeps
pydantic-settings' rules: keyword arguments win over the environment (an explicit None too), the
environment's names are case-insensitive, and ``home`` is a Path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

ENV_PREFIX = "PHALANX_"
_UNSET: Any = object()


def default_home() -> Path:
    return Path.home() / ".phalanx"


def sqlite_url(path: Path) -> str:
    """The ``sqlite:///PATH`` URL of a database file, its path percent-quoted: SQLAlchemy decodes
    escapes in a URL's path and ends the path at `?`, so a folder named `%41b` or `a?b` would
    otherwise name another file (store/lite.py's ``sqlite_path`` reads it back the same way)."""
    return f"sqlite:///{quote(str(path))}"


def _env() -> dict[str, str]:
    """The PHALANX_* variables, by lower-case field name (as pydantic-settings matched them)."""
    n = len(ENV_PREFIX)
    return {k[n:].lower(): v for k, v in os.environ.items() if k[:n].upper() == ENV_PREFIX}


class Settings:
    """Where experiments live. Each field is the keyword given, else ``PHALANX_<FIELD>``, else its
    default. (Not a dataclass: pydantic models that hold one, ServerSettings, take it as it is.)"""

    home: Path
    db_url: str | None  # default: SQLite under home
    artifacts_url: str | None  # default: a folder under home (any fsspec URL)
    host: str | None  # a Phalanx server replicas report to over HTTP
    token: str | None

    def __init__(
        self,
        *,
        home: Path | str = _UNSET,
        db_url: str | None = _UNSET,
        artifacts_url: str | None = _UNSET,
        host: str | None = _UNSET,
        token: str | None = _UNSET,
    ) -> None:
        env = _env()

        def pick(name: str, given: Any) -> Any:
            return env.get(name) if given is _UNSET else given

        chosen_home = pick("home", home)
        self.home = default_home() if chosen_home is None else Path(chosen_home)
        self.db_url = pick("db_url", db_url)
        self.artifacts_url = pick("artifacts_url", artifacts_url)
        self.host = pick("host", host)
        self.token = pick("token", token)

    def _fields(self) -> tuple[Any, ...]:
        return (self.home, self.db_url, self.artifacts_url, self.host, self.token)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self._fields() == other._fields()

    def __repr__(self) -> str:
        token = None if self.token is None else "***"
        return (
            f"Settings(home={self.home!r}, db_url={self.db_url!r}, artifacts_url={self.artifacts_url!r},"
            f" host={self.host!r}, token={token!r})"
        )

    @property
    def database_url(self) -> str:
        return self.db_url or sqlite_url(self.home / "phalanx.db")

    @property
    def artifacts_root(self) -> str:
        return self.artifacts_url or str(self.home / "artifacts")

    @property
    def spool_dir(self) -> Path:
        return self.home / "spool"

    @property
    def runs_dir(self) -> Path:
        """Per-experiment folders: replica log files, launcher state."""
        return self.home / "runs"

    @property
    def venvs_dir(self) -> Path:
        return self.home / "venvs"

    @property
    def clusters_file(self) -> Path:
        return self.home / "clusters.toml"
