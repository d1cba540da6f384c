"""A PHALANX_HOME whose path holds characters a URL gives a meaning to (`%41`, `?`, `#`, a space): the
full store (SQLAlchemy, which decodes percent escapes and splits at `?`) and the lean reader of
`phalanx ls` (sqlite3, no SQLAlchemy) both use the database file under that very folder.

Before: the store of a home `/x/%41b` was `/x/Ab/phalanx.db`, of `/x/a?b` the file `/x/a`; the lean
reader looked under the home itself, found no file and left every read to the full path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.store import open_store
from phalanx.store.lite import LiteReader, sqlite_path
from phalanx.store.migrations import HEAD
from tests.support.cli import phalanx_cli

FOLDERS = ["%41b", "100%", "a b", "a#b", "a?b", "a@b:c", "é%2F"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_store_and_the_lean_reader_use_the_file_under_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str
) -> None:
    home = tmp_path / folder
    monkeypatch.setenv("PHALANX_HOME", str(home))
    for var in ("PHALANX_DB_URL", "PHALANX_ARTIFACTS_URL", "PHALANX_HOST", "PHALANX_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    settings = Settings()
    assert sqlite_path(settings.database_url) == home / "phalanx.db"
    store = open_store(settings)
    try:
        made = store.create_experiment(name="e", project="p", backend="local").id
    finally:
        store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder]  # nothing beside the home
    assert (home / "phalanx.db").is_file()
    reader = LiteReader.open(settings.database_url, HEAD)
    assert reader is not None
    with reader:
        assert reader.has_experiment(made)
    done = phalanx_cli("ls", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert [e["id"] for e in json.loads(done.stdout)] == [made]


def test_a_given_database_url_is_read_alike_by_both() -> None:
    """PHALANX_DB_URL is a URL: its escapes mean to the lean reader what they mean to SQLAlchemy."""
    assert sqlite_path("sqlite:////x/a%20b/p.db") == Path("/x/a b/p.db")
    assert sqlite_path("sqlite:////x/%2541b/p.db") == Path("/x/%41b/p.db")
    assert sqlite_path("sqlite:////x/a%3Fb/p.db") == Path("/x/a?b/p.db")
