"""Per-project secrets (object-storage keys and other credentials) handed to the project's
experiments on this machine as environment variables, seen through the Store.

Values are encrypted with Fernet (the ``cryptography`` package, the ``secrets`` extra) under a key
kept in ``<home>/secrets.key`` (created on first use, mode 0600), so the database file, its dumps and
backups never hold a value in clear; whoever can read the key file can read the secrets (the
server's account). No API answer, listing, log line or file Phalanx writes shows a value: ``names``
lists names only, and the supervisor hands the values to its replicas through the process
environment it passes on (never the experiment's files, its dry run or the store's records).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from phalanx.errors import NotFound, UsageError
from phalanx.store.accounts import check_project
from phalanx.store.sealing import MAX_VALUE, check_name, fernet, unseal
from phalanx.store.sql import secrets
from phalanx.store.sql.errors import translating
from phalanx.tracking.labels import label_problem

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


def put(store: LocalStore, home: Path, project: str, name: str, value: str) -> None:
    """Set (replace) the project's secret ``name``."""
    problem = label_problem(project, "project")
    if problem:
        raise UsageError(problem)
    check_name(name)
    if not value or len(value.encode()) > MAX_VALUE or "\0" in value:
        raise UsageError(f"secret {name}: give a value of 1 byte to 64 KiB, without NUL characters")
    check_project(store, project)
    token = fernet(home).encrypt(value.encode()).decode()
    secrets.put(store.engine, project, name, token)


def names(store: LocalStore, project: str | None = None) -> list[tuple[str, str, float]]:
    """(project, name, updated_at) of every secret, or of one project's: never a value."""
    return secrets.names(store.engine, project)


def remove(store: LocalStore, project: str, name: str) -> None:
    """Remove the project's secret ``name``. NotFound when it has none: for a project a team server
    does not know, in ``check_project``'s words (one set while projects were labels is removed)."""
    if secrets.remove(store.engine, project, name):
        return
    check_project(store, project)
    raise NotFound(f"project {project} has no secret {name} (`phalanx secret ls {project}`)")


@translating  # a database that cannot be reached: BackendUnavailable (the supervisor waits it out)
def environment(store: LocalStore, home: Path, project: str) -> dict[str, str]:
    """The project's secrets in clear, for its experiments' environment only. A project without
    secrets gives none (and needs no key)."""
    return unseal(secrets.ciphertexts(store.engine, project), home)


class SecretBook(Protocol):
    """A door to the projects' secrets: this machine's store (``LocalSecrets``) or a server's API
    (``remote_store.RemoteSecrets``). Values only go in; names and times come out."""

    def put(self, project: str, name: str, value: str) -> None:
        """Set (replace) the project's secret ``name``. UsageError for a bad name or value."""
        ...

    def names(self, project: str | None = None) -> list[tuple[str, str, float]]:
        """(project, name, updated_at) of every secret, or of one project's: never a value."""
        ...

    def remove(self, project: str, name: str) -> None:
        """Remove the project's secret ``name``. NotFound when it has none, or for a project a team
        server does not know (``check_project``), in the same words on both doors."""
        ...


class LocalSecrets:
    """The secrets in this machine's store, sealed with its home's key."""

    def __init__(self, store: LocalStore, home: Path) -> None:
        self.store = store
        self.home = home

    def put(self, project: str, name: str, value: str) -> None:
        put(self.store, self.home, project, name, value)

    def names(self, project: str | None = None) -> list[tuple[str, str, float]]:
        return names(self.store, project)

    def remove(self, project: str, name: str) -> None:
        remove(self.store, project, name)
