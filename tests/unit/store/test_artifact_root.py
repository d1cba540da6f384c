"""A local artifact root is read without fsspec (whose import is 0.1 CPU-s of every process that
opens the store, issue 42): the folder must be the one fsspec itself would use."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.store import artifacts


@pytest.mark.parametrize("form", ["{p}", "{p}/", "file://{p}", "local://{p}"])
def test_a_local_root_is_the_folder_fsspec_names(tmp_path: Path, form: str) -> None:
    url = form.format(p=tmp_path / "art")
    assert artifacts.local_path(url) == artifacts.open_fs(url)[1] == str(tmp_path / "art")


def test_a_relative_or_home_root_is_made_absolute_as_fsspec_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for url in ("rel/art", "~/art"):
        assert artifacts.local_path(url) == artifacts.open_fs(url)[1], url


def test_an_object_store_url_is_not_local() -> None:
    assert artifacts.local_path("s3://bucket/prefix") is None
    assert artifacts.local_path("memory://x") is None


def test_a_local_store_opens_its_filesystem_at_the_first_file_it_moves(tmp_path: Path) -> None:
    store = artifacts.ArtifactStore(str(tmp_path / "art"))
    assert store.local and (tmp_path / "art").is_dir()
    assert "fs" not in vars(store)  # nothing moved yet: fsspec not opened
    store.put_bytes("e1", "a/b.txt", b"hi")
    assert store.read_bytes("e1", "a/b.txt") == b"hi"
    assert (tmp_path / "art" / "e1" / "a" / "b.txt").read_bytes() == b"hi"
    assert store.list("e1") == ["a/b.txt"]
