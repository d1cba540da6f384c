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
    monkeypatch.setattr(sys, "path", [str(folder)])
    return folder


def _refuse_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("read the metadata again")

    monkeypatch.setattr(repro, "_distributions", refuse)


def test_a_second_run_reads_no_metadata(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]
    _refuse_reading(monkeypatch)
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]


def test_an_install_is_seen(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]
    _dist(site, "beta", "2.0")  # `pip install beta`: a new dist-info folder
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0", "beta==2.0"]
    _refuse_reading(monkeypatch)
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0", "beta==2.0"]


def test_other_files_in_an_import_folder_change_nothing(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script's own folder is on its path and it writes there: that is no install."""
    cache = tmp_path / "cache"
    repro.packages(sys.executable, cache=cache)
    (site / "outputs.csv").write_text("1,2\n")
    (site / "results").mkdir()
    _refuse_reading(monkeypatch)
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]


def test_an_upgrade_in_place_is_seen(site: Path, tmp_path: Path) -> None:
    """A dist-info folder rewritten under the same name (a reinstall that kept it) has a new time."""
    cache = tmp_path / "cache"
    repro.packages(sys.executable, cache=cache)
    info = site / "alpha-1.0.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: alpha\nVersion: 1.1\n")
    os.utime(info, ns=(2 * 10**18, 2 * 10**18))  # what adding or replacing a file in it does
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.1"]


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


def test_a_folder_without_distributions_on_the_path_keeps_the_same_list(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A foreground `phalanx run` has the folder it is typed in first on its path, its detached
    supervisor (``python -P``) not: one list serves both while that folder holds no distribution."""
    cache = tmp_path / "cache"
    repro.packages(sys.executable, cache=cache)
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    monkeypatch.setattr(sys, "path", [str(project), str(site)])
    _refuse_reading(monkeypatch)
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]
    monkeypatch.setattr(sys, "path", [str(site)])
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0"]


def test_a_distribution_in_the_folder_on_the_path_is_seen(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    repro.packages(sys.executable, cache=cache)
    project = tmp_path / "project"
    project.mkdir()
    _dist(project, "local_pkg", "0.1")  # `pip install -e .` leaves its dist-info here
    monkeypatch.setattr(sys, "path", [str(project), str(site)])
    assert repro.packages(sys.executable, cache=cache) == ["alpha==1.0", "local_pkg==0.1"]
