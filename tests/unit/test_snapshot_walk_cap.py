"""A plain script run from a huge folder (a home folder, a data tree) snapshots only the first
WALK_MAX_FILES files it looks at. The user must be told so where they look (`phalanx get`), and
not as "N files over the size caps" naming a marker as if it were a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx import repro
from phalanx.cli.details import run_details_text


def test_a_snapshot_stopped_by_the_walk_cap_says_so_in_get(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(repro, "WALK_MAX_FILES", 5)
    for d in range(4):
        (tmp_path / f"d{d}").mkdir()
        for f in range(3):
            (tmp_path / f"d{d}" / f"f{f}.txt").write_text("x")
    _, info = repro.snapshot(str(tmp_path))
    assert info["walk_stopped"] is True
    note = repro.left_out_note(info)
    assert note is not None
    assert "over the size caps" not in note  # no file was over a size cap
    assert "after the first 5" in note
    source = {"git": None, "python": "3", "phalanx": "0", "packages": 1, "host": "h", "snapshot": info}
    lines = run_details_text({"source": source})
    assert any(line.startswith("snapshot:") and "after the first 5" in line for line in lines), lines


def test_a_whole_snapshot_adds_no_snapshot_line_to_get(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    _, info = repro.snapshot(str(tmp_path))
    assert info["walk_stopped"] is False
    source = {"git": None, "python": "3", "phalanx": "0", "packages": 1, "host": "h", "snapshot": info}
    assert not any(line.startswith("snapshot:") for line in run_details_text({"source": source}))
