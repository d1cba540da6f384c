"""A home's secrets key and the rule of which names a secret may have: what sealing and handing on a
project's secrets needs, without the store (the supervisor reads the sealed values before its
replicas start, without importing the store's SQL: ``store.lite.LiteReader.secret_ciphertexts``).
``phalanx.store.secrets`` keeps them in the store."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phalanx.errors import MissingExtra, UsageError

_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
MAX_VALUE = 64 * 1024


def fernet(home: Path) -> Any:
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


def loads_code(name: str) -> bool:
    """A name programs read to load or run code: never a secret's, set or handed on."""
    return name.startswith(_NOT_SECRET_PREFIXES) or name in _NOT_SECRETS


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name) or loads_code(name):
        raise UsageError(
            f"secret name {name!r}: an environment variable name in capitals, digits and '_'"
            " (e.g. AWS_SECRET_ACCESS_KEY), not one that programs read to load or run code (PATH,"
            " LD_*, PYTHON*, GIT_*, ...) and not starting with PHALANX_"
        )
    return name


def unseal(sealed: Mapping[str, str], home: Path) -> dict[str, str]:
    """A project's secrets in clear from their ciphertexts (``sealed``, by name), for its experiments'
    environment only. None gives none (and needs no key); one stored before such names were refused
    is never handed on."""
    if not sealed:
        return {}
    key = fernet(home)
    return {
        name: key.decrypt(token.encode()).decode() for name, token in sealed.items() if not loads_code(name)
    }
