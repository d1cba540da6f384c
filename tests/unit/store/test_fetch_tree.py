"""`phalanx data get --dir` into a folder that already exists (``manifest.fetch_tree``): a file
whose folder is on another filesystem (a mount or a link under it) is copied there, and a failure
while the files are put in place leaves the folder as it was, nothing of the fetch in it."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from phalanx.errors import UsageError
from phalanx.store import manifest
from phalanx.store.manifest import build_manifest, fetch_tree


@pytest.fixture
def version(tmp_path: Path) -> manifest.Manifest:
    source = tmp_path / "source"
    (source / "z").mkdir(parents=True)
    (source / "a.txt").write_text("one\n")
    (source / "z" / "b.txt").write_text("two\n")
    (source / "new" / "deep").mkdir(parents=True)
    (source / "new" / "deep" / "c.txt").write_text("three\n")
    return build_manifest(str(source))


@pytest.fixture
def existing(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "z").mkdir(parents=True)
    (out / "a.txt").write_text("old\n")
    (out / "kept.txt").write_text("mine\n")
    return out


def _everything(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_file_whose_folder_is_on_another_filesystem_is_copied_there(
    version: manifest.Manifest, existing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.replace

    def across(src: Any, dst: Any) -> None:  # `z` is a mount of another filesystem
        if Path(dst).parent == existing / "z" and "/.out.phalanx-get-" in str(src):
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))
        real(src, dst)

    monkeypatch.setattr(manifest.os, "replace", across)
    fetch_tree(version, existing)
    assert _everything(existing) == {
        "a.txt": "one\n",
        "kept.txt": "mine\n",
        "new/deep/c.txt": "three\n",
        "z/b.txt": "two\n",
    }


def test_a_failure_while_placing_the_files_leaves_the_folder_as_it_was(
    version: manifest.Manifest, existing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.replace

    def full(src: Any, dst: Any) -> None:  # the last file's folder is full
        if Path(dst).name.startswith(".c.txt.phalanx-get-"):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        real(src, dst)

    monkeypatch.setattr(manifest.os, "replace", full)
    with pytest.raises(UsageError, match=r"No space left on device.*nothing in the folder was changed"):
        fetch_tree(version, existing)
    assert _everything(existing) == {"a.txt": "old\n", "kept.txt": "mine\n"}
    assert sorted(p.name for p in existing.rglob("*")) == ["a.txt", "kept.txt", "z"]  # no folder made
    assert not [p for p in existing.parent.iterdir() if ".phalanx-get-" in p.name]
    shutil.rmtree(existing)
