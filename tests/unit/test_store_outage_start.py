"""A supervisor of an experiment the server accepted opens its store through a database outage (the
answer promised it would run); one started from a shell says at once that the store is down."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.errors import BackendUnavailable, StoreUnavailable
from phalanx.runner import running


def test_the_store_is_opened_once_the_outage_ends_and_not_waited_for_without_patience(
    phalanx_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(home=phalanx_home)
    tries: list[int] = []
    opened = object()

    def open_store(_: Settings) -> object:
        tries.append(1)
        if len(tries) < 3:
            raise StoreUnavailable("cannot open the database: connection refused")
        return opened

    monkeypatch.setattr(running, "open_store", open_store)
    monkeypatch.setattr(running.time, "sleep", lambda _s: None)
    assert running.open_store_through_outage(settings, patience=60.0) is opened
    assert len(tries) == 3
    tries.clear()
    with pytest.raises(BackendUnavailable):
        running.open_store_through_outage(settings, patience=0.0)
    assert len(tries) == 1
