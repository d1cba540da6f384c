"""Where Phalanx keeps its state, read from the environment (pydantic-settings).

Passed explicitly into the store, the supervisor and the server: no module-level globals.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_home() -> Path:
    return Path.home() / ".phalanx"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PHALANX_", extra="ignore")

    home: Path = Field(default_factory=default_home)
    db_url: str | None = None  # default: SQLite under home
    artifacts_url: str | None = None  # default: a folder under home (any fsspec URL)
    host: str | None = None  # a Phalanx server replicas report to over HTTP
    token: str | None = None

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.home / 'phalanx.db'}"

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
