"""``repro.packages`` keeps this interpreter's package list per environment: a second run does not
read every distribution's metadata, and an install (a new dist-info folder) is seen at once."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from phalanx import repro


def _dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site-packages of one distribution as the interpreter's whole import path."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    _dist(folder, "alpha", "1.0")
    os.utime(folder, ns=(10**18, 10**18))  # as of long ago: the install below surely changes it
    monkeypatch.setattr(sys, "path", [str(folder)])
    return folder


def _refuse_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("read the metadata again")

    monkeypatch.setattr(repro.md, "distributions", refuse)


def test_a_second_run_reads_no_metadata(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]
    _refuse_reading(monkeypatch)
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]


def test_an_install_is_seen(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]
    _dist(site, "beta", "2.0")  # `pip install beta`: a new folder changes site-packages' mtime
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0", "beta==2.0"]
    _refuse_reading(monkeypatch)
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0", "beta==2.0"]


def test_another_environment_does_not_take_this_ones_list(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    repro.packages(sys.executable, cache=cache)
    other = tmp_path / "other-site"
    other.mkdir()
    _dist(other, "gamma", "3.0")
    monkeypatch.setattr(sys, "path", [str(other)])
    assert repro.packages(sys.executable, cache=cache) == ["gamma==3.0"]


def test_a_damaged_cache_is_read_over(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    repro.packages(sys.executable, cache=cache)
    (kept,) = (cache / "packages").glob("*.json")
    kept.write_text("{not json")
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]


def test_without_a_cache_every_call_reads(site: Path) -> None:
    assert repro.packages(sys.executable) == ["alpha==1.0"]
    assert not list(site.parent.glob("cache"))
