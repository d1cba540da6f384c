"""``Experiment(..., server=URL)``: what a server cannot take yet is refused before anything is
packed or sent (the URL is a closed port: a request would fail differently)."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.errors import UsageError
from phalanx.estimators import Estimator, Experiment

NOWHERE = "http://127.0.0.1:9"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def test_a_server_url_without_scheme_is_refused() -> None:
    with pytest.raises(UsageError, match="http://gpu-box:8000"):
        Experiment("e", server="gpu-box:8000")


def test_what_a_server_cannot_take_yet_is_refused_before_sending(phalanx_home: Path, source: Path) -> None:
    exp = Experiment("e", server=NOWHERE)
    with pytest.raises(UsageError, match="wait=False with server="):
        exp.submit(Estimator(source_directory=source, entry_script="train.py"), wait=False)
