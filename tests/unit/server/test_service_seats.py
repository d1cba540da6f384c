"""A server's service gives back what it took of the machine's ledger however its start ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.domain import Range, Resources
from phalanx.machine.ledger import Ledger, ledger_path
from phalanx.server.services import Services
from phalanx.store import open_store


def test_a_notebook_that_cannot_start_gives_its_seat_back_and_leaves_no_folder(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = open_store(Settings(home=home))
    services = Services(store, home, lambda _: None)
    (home / "notebooks").mkdir(parents=True)
    (home / "notebooks" / "B").write_text("a file where the project's notebook folder goes")
    with pytest.raises(OSError):
        services.notebook("B", {}, "ada", None, Resources(cpu=Range(limits=1), memory=Range(limits=64)))
    assert Ledger(ledger_path(home)).snapshot()[0] == []  # its core and memory back
    assert list((home / "services").iterdir()) == []
    assert services.listed() == []
