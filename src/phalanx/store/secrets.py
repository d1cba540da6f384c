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

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.errors import MissingExtra, UsageError
from phalanx.store.sql import secrets
from phalanx.tracking.labels import label_problem

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore

_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
MAX_VALUE = 64 * 1024


def _fernet(home: Path) -> Any:
    """The Fernet of this home, its key created (0600, atomically) on first use."""
    try:
        from cryptography.fernet import Fernet  # why: cryptography is optional (the `secrets` extra)
    except ImportError:
        raise MissingExtra("secrets", "per-project secrets") from None
    path = home / "secrets.key"
    try:
        return Fernet(path.read_bytes().strip())
    except FileNotFoundError:
        pass
    home.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".secrets.key.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(Fernet.generate_key())
    try:
        os.link(tmp, path)  # first writer wins: never two keys for one home
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return Fernet(path.read_bytes().strip())


# names a program reads to load or run other code (the dynamic loader's, interpreters', shells'),
# or to find what it runs: never a secret's, as root may start a program while they are set
_NOT_SECRETS = frozenset(
    {
        "PATH",
        "HOME",
        "SHELL",
        "ENV",
        "BASH_ENV",
        "IFS",
        "PS4",
        "SHELLOPTS",
        "BASHOPTS",
        "GCONV_PATH",
        "GETCONF_DIR",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TMPDIR",
        "TZDIR",
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "JAVA_TOOL_OPTIONS",
    }
)
_NOT_SECRET_PREFIXES = ("PHALANX_", "LD_", "PYTHON", "GIT_", "BASH_FUNC_")


def _loads_code(name: str) -> bool:
    """A name programs read to load or run code: never a secret's, set or handed on."""
    return name.startswith(_NOT_SECRET_PREFIXES) or name in _NOT_SECRETS


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name) or _loads_code(name):
        raise UsageError(
            f"secret name {name!r}: an environment variable name in capitals, digits and '_'"
            " (e.g. AWS_SECRET_ACCESS_KEY), not one that programs read to load or run code (PATH,"
            " LD_*, PYTHON*, GIT_*, ...) and not starting with PHALANX_"
        )
    return name


def put(store: LocalStore, home: Path, project: str, name: str, value: str) -> None:
    """Set (replace) the project's secret ``name``."""
    problem = label_problem(project, "project")
    if problem:
        raise UsageError(problem)
    check_name(name)
    if not value or len(value.encode()) > MAX_VALUE or "\0" in value:
        raise UsageError(f"secret {name}: give a value of 1 byte to 64 KiB, without NUL characters")
    token = _fernet(home).encrypt(value.encode()).decode()
    secrets.put(store.engine, project, name, token)


def names(store: LocalStore, project: str | None = None) -> list[tuple[str, str, float]]:
    """(project, name, updated_at) of every secret, or of one project's: never a value."""
    return secrets.names(store.engine, project)


def remove(store: LocalStore, project: str, name: str) -> bool:
    return secrets.remove(store.engine, project, name)


def environment(store: LocalStore, home: Path, project: str) -> dict[str, str]:
    """The project's secrets in clear, for its experiments' environment only. A project without
    secrets gives none (and needs no key)."""
    found = secrets.ciphertexts(store.engine, project)
    if not found:
        return {}
    fernet = _fernet(home)  # one stored before such names were refused is never handed on
    return {
        name: fernet.decrypt(token.encode()).decode()
        for name, token in found.items()
        if not _loads_code(name)
    }


class SecretBook(Protocol):
    """A door to the projects' secrets: this machine's store (``LocalSecrets``) or a server's API
    (``remote_store.RemoteSecrets``). Values only go in; names and times come out."""

    def put(self, project: str, name: str, value: str) -> None:
        """Set (replace) the project's secret ``name``. UsageError for a bad name or value."""
        ...

    def names(self, project: str | None = None) -> list[tuple[str, str, float]]:
        """(project, name, updated_at) of every secret, or of one project's: never a value."""
        ...

    def remove(self, project: str, name: str) -> bool:
        """Remove the project's secret ``name``; whether there was one."""
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

    def remove(self, project: str, name: str) -> bool:
        return remove(self.store, project, name)
