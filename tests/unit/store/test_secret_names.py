"""A secret's name: an environment variable a project's experiments read, never one that a program
(the dynamic loader, an interpreter, a shell, git) reads to load or run other code, since root starts
programs while a project's secrets are in its environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.errors import UsageError
from phalanx.store import secrets
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.lite import LiteReader
from phalanx.store.migrations import HEAD
from phalanx.store.sealing import check_name, fernet, unseal
from phalanx.store.sql import secrets as rows
from phalanx.store.sql.store import SqlStore


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "WANDB_API_KEY", "_X1"])
def test_a_secrets_name_is_an_ordinary_variable(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PATH", "GCONV_PATH", "GIT_SSH_COMMAND",
     "BASH_ENV", "OPENSSL_CONF", "PHALANX_TOKEN", "lower", "A-B", "KEY\n"],
)  # fmt: skip
def test_a_name_programs_read_to_run_code_is_refused_saying_so(name: str) -> None:
    with pytest.raises(UsageError, match="not one that programs read to load or run code"):
        check_name(name)


def test_a_secret_stored_under_such_a_name_before_is_never_handed_on(tmp_path: Path) -> None:
    """A store written before these names were refused may hold one: its experiments never get it."""
    store = SqlStore(f"sqlite:///{tmp_path / 'phalanx.db'}", ArtifactStore(str(tmp_path / "artifacts")))
    try:
        secrets.put(store, tmp_path, "vision", "HF_TOKEN", "hf-1")
        planted = fernet(tmp_path).encrypt(b"/tmp/evil.so").decode()
        rows.put(store.engine, "vision", "LD_PRELOAD", planted)  # as an older Phalanx stored it
        assert secrets.environment(store, tmp_path, "vision") == {"HF_TOKEN": "hf-1"}
        # the supervisor reads them through the lean reader before its replicas start: the same
        reader = LiteReader.open(f"sqlite:///{tmp_path / 'phalanx.db'}", HEAD)
        assert reader is not None
        with reader:
            assert unseal(reader.secret_ciphertexts("vision"), tmp_path) == {"HF_TOKEN": "hf-1"}
            assert reader.secret_ciphertexts("nlp") == {}
    finally:
        store.close()
