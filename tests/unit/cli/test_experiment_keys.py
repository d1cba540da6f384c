"""`phalanx ls -o json` and `phalanx get -o json` show every experiment with one set of keys, the
REST API's where they overlap (group_id null, kind "training", notes), on the lean path, Typer's
path and a server's answer. Before, group_id was there only for trials and kind only for services,
and `phalanx get -o json` had no kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import update

from phalanx.config import Settings
from phalanx.server.schemas import ExperimentOut
from phalanx.store import open_store
from phalanx.store.base import Store
from phalanx.store.sql.models import ExperimentRow
from tests.support.cli import phalanx_cli
from tests.unit.cli.conftest import TOKEN, Served

SERVER = {"PHALANX_TOKEN": TOKEN}


def _three(store: Any) -> list[str]:
    """A plain training run, a trial of a group and a `phalanx serve` session."""
    plain = store.create_experiment(name="plain", project="p").id
    trial = store.create_experiment(name="trial", project="p").id
    group = store.create_group(
        name="g", project="p", search="grid", planned=1, concurrency=1, metric=None, optimization=None,
        spec_text="", source_file=None, workdir=None, options={},
    )  # fmt: skip
    store.link_experiment(trial, group.id)
    service = store.create_experiment(name="serve", project="p").id
    with store._writer.begin() as conn:
        conn.execute(update(ExperimentRow).where(ExperimentRow.c.id == service).values(kind="service"))
    return [plain, trial, service]


def _documents(*args: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    done = phalanx_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    return found if isinstance(found, list) else [found]


def test_every_experiment_has_the_same_keys_on_every_path_and_door(
    served: Served, phalanx_home: Path
) -> None:
    store: Store = open_store(Settings())
    ids = _three(store)
    _three(served.store)
    store.close()
    lean = _documents("ls", "-o", "json")  # the lean path (store/lite)
    full = _documents("ls", "-o", "json", "--local")  # Typer's, through the full store
    there = _documents("ls", "-o", "json", "--server", served.url, env=SERVER)
    keys = set(lean[0])
    for doc in [*lean, *full, *there]:
        assert set(doc) == keys, doc
    assert {d["name"]: (d["group_id"] is not None, d["kind"]) for d in lean} == {
        "plain": (False, "training"),
        "trial": (True, "training"),
        "serve": (False, "service"),
    }
    assert keys >= {"group_id", "kind", "notes"}
    api = set(ExperimentOut.model_fields) - {"columns"}  # columns: only with `ls --column`
    assert api <= keys, api - keys
    for ident in ids:  # `phalanx get -o json`: the same keys, and its details besides
        assert keys <= set(_documents("get", ident, "-o", "json")[0])
