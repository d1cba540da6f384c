"""Every room of src/phalanx sits in a layer of the contract (.importlinter; issue 35).

lint-imports checks the arrows between the rooms a layer names and says nothing of a module no layer
names: a new top-level module would float free of the contract. This test reads the contract and the
package's top level (no process, nothing imported) and names each room missing from the layers, and
each layer entry that names no room.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "phalanx"
CONTRACT = REPO / ".importlinter"


def layered(contract: str) -> set[str]:
    """The rooms (``phalanx.X``) that the layers contract names, siblings (``|``, ``:``) included."""
    parser = configparser.ConfigParser()
    parser.read_string(contract)
    rooms: set[str] = set()
    for section in parser.sections():
        if parser[section].get("type") == "layers":
            for line in parser[section]["layers"].splitlines():
                rooms.update(r.strip() for r in re.split(r"[|:]", line) if r.strip())
    return rooms


def rooms(src: Path) -> set[str]:
    """``phalanx.X`` for each sub-package and module at the package's top (not the root itself)."""
    found = {f"phalanx.{p.stem}" for p in src.glob("*.py") if p.name != "__init__.py"}
    return found | {f"phalanx.{p.name}" for p in src.iterdir() if (p / "__init__.py").exists()}


def unplaced(src: Path, contract: str) -> tuple[list[str], list[str]]:
    placed, present = layered(contract), rooms(src)
    return sorted(present - placed), sorted(placed - present)


def test_every_room_of_the_package_is_in_the_layers_contract() -> None:
    missing, stale = unplaced(SRC, CONTRACT.read_text(encoding="utf-8"))
    assert not missing, (
        f"in no layer of .importlinter: {missing}; add each to the layer its imports say (above every "
        "room it imports, below every room that imports it) and to docs/architecture.md's rooms"
    )
    assert not stale, f".importlinter names rooms that do not exist: {stale}"


def test_a_new_module_outside_the_layers_is_named(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "__init__.py").write_text("")
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "errors.py").write_text("")
    (tmp_path / "stray.py").write_text("")
    (tmp_path / "notes").mkdir()  # no package: not a room
    contract = (
        "[importlinter]\nroot_package = phalanx\n\n[importlinter:contract:layers]\nname = x\n"
        "type = layers\nlayers =\n    phalanx.store\n    phalanx.errors | phalanx.gone\n"
    )
    assert unplaced(tmp_path, contract) == (["phalanx.stray"], ["phalanx.gone"])
