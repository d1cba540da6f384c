"""`phalanx tag`, `phalanx note` and `phalanx reports`: edit what the user keeps on an experiment and
read what its scripts reported as text."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from phalanx.cli.app import app
from phalanx.cli.main import _register
from phalanx.config import Settings
from phalanx.domain import Event, EventKind
from phalanx.store import open_store

CLI = CliRunner()
_register()


def test_tag_note_and_reports(phalanx_home: Path) -> None:
    store = open_store(Settings())
    exp = store.create_experiment(name="x", project="p").id
    store.write_events(
        [Event(exp, EventKind.TEXT, {"title": "summary", "text": "best acc 0.93", "step": 3}, stream="s")]
    )
    assert CLI.invoke(app, ["tag", exp, "best", "baseline"]).output.strip() == "best baseline"
    assert CLI.invoke(app, ["tag", exp, "--remove", "baseline"]).output.strip() == "best"
    assert CLI.invoke(app, ["note", exp, "lr too high"]).exit_code == 0
    assert CLI.invoke(app, ["note", exp, "--append", "try 0.01"]).exit_code == 0
    assert CLI.invoke(app, ["note", exp]).output == "lr too high\ntry 0.01\n"
    got = store.get_experiment(exp)
    assert got.tags == ("best",) and got.notes == "lr too high\ntry 0.01"
    assert "best acc 0.93" in CLI.invoke(app, ["reports", exp]).output
    doc = json.loads(CLI.invoke(app, ["get", exp, "-o", "json"]).output)
    assert doc["notes"] == "lr too high\ntry 0.01" and doc["reports"][0]["text"] == "best acc 0.93"
    assert "summary: best acc 0.93" in CLI.invoke(app, ["get", exp]).output
    store.close()
