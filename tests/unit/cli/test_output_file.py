"""`phalanx plot ID -o DIR/x.png` with a mistyped DIR: refused (exit 2, the folder named), nothing
created, on both doors. Before, the folder was created and the image written there (exit 0)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.cli.conftest import Served
from tests.unit.cli.test_door_mistakes import both


def test_plot_refuses_an_output_folder_that_does_not_exist(served: Served, phalanx_home: Path) -> None:
    missing = phalanx_home.parent / "nonexistent" / "dir"
    image = missing / "x.png"
    said = f"error: -o {image}: no folder {missing}; create it first, or give another"
    here, there = both(served, "plot", "0123456789ab", "--title", "loss", "-o", str(image))
    assert here == (2, said), here
    assert there == (2, said), there
    assert not missing.parent.exists()


def test_plot_refuses_an_output_folder_that_is_a_file(served: Served, phalanx_home: Path) -> None:
    a_file = phalanx_home.parent / "notes.txt"
    a_file.write_text("x")
    image = a_file / "x.png"
    here, there = both(served, "plot", "0123456789ab", "-o", str(image))
    said = f"error: -o {image}: {a_file} is a file, not a folder; create it first, or give another"
    assert here == there == (2, said), (here, there)
