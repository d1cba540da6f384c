"""The download cache: one fetch per content however many experiments ask at once, never half a
folder, changed bytes refused, old entries collected."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from phalanx.data import cache
from phalanx.store import manifest
from phalanx.store.manifest import DataChanged, build_manifest


def test_concurrent_fetches_download_once_and_share_the_folder(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = build_manifest(str(folder))
    copies: list[str] = []
    real = manifest.copy_file

    def counting(*args: Any) -> None:
        copies.append(args[2].path)
        real(*args)

    monkeypatch.setattr(cache, "copy_file", counting)
    home = tmp_path / "home"
    results: list[Path] = []
    start = threading.Barrier(6)

    def experiment() -> None:
        start.wait(timeout=60)  # six experiments starting at the same moment
        results.append(cache.fetch(home, m, m.digest, "test"))

    threads = [threading.Thread(target=experiment) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 6 and len(set(results)) == 1
    assert sorted(copies) == sorted(f.path for f in m.files)  # each file fetched exactly once
    local = results[0]
    assert (local / "train" / "x.csv").read_text() == "1,2,3\n"
    assert not os.access(local / "labels.txt", os.W_OK) or os.geteuid() == 0  # read-only files
    assert [p.name for p in (home / "cache" / "data").iterdir() if p.name.startswith(".tmp-")] == []


def test_a_changed_file_leaves_no_cache_entry(folder: Path, tmp_path: Path) -> None:
    m = build_manifest(str(folder))
    (folder / "labels.txt").write_text("tampered\n")
    with pytest.raises(DataChanged):
        cache.fetch(tmp_path / "home", m, m.digest, "dataset digits@1")
    root = cache.cache_root(tmp_path / "home")
    assert not (root / m.digest).exists()
    assert [p for p in root.iterdir() if p.is_dir()] == []  # the temporary folder is gone too


def test_gc_removes_entries_unused_for_a_week(folder: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    m = build_manifest(str(folder))
    local = cache.fetch(home, m, m.digest, "test")
    assert cache.collect(home) == []  # just used
    assert cache.collect(home, now=os.path.getmtime(local) + cache.CACHE_MAX_AGE + 10) == [m.digest]
    assert not local.exists()
    assert cache.fetch(home, m, m.digest, "test").is_dir()  # fetched again when asked again
