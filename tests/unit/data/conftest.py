from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.store import open_store


@pytest.fixture
def store(phalanx_home: Path) -> Iterator[Any]:
    opened = open_store(Settings(home=phalanx_home))
    yield opened
    opened.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    data = tmp_path / "digits"
    (data / "train").mkdir(parents=True)
    (data / "train" / "x.csv").write_text("1,2,3\n")
    (data / "labels.txt").write_text("0\n1\n")
    return data
