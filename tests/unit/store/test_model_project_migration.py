"""Migration 0013_scoping_model_project: models registered before it get the project of the
experiment they were first registered from (or the one their lineage recorded, or 'default')."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from sqlalchemy import text

from phalanx.store.registry import registry_store
from phalanx.store.sql import SqlStore
from phalanx.store.sql.engine import alembic_config


def _version(experiment_id: str, lineage_project: str | None) -> dict[str, object]:
    lineage = {} if lineage_project is None else {"experiment": {"project": lineage_project}}
    return {
        "experiment_id": experiment_id,
        "source": "m.onnx",
        "path": "p",
        "sha256": "0" * 64,
        "size": 1,
        "signature": {},
        "lineage": lineage,
        "description": None,
        "tags": {},
    }


def test_existing_models_get_their_source_experiments_project(tmp_path: Path) -> None:
    check_existing_models_get_their_projects(f"sqlite:///{tmp_path / 'db.sqlite'}")


def check_existing_models_get_their_projects(url: str) -> None:
    """On the store at ``url`` (SQLite here, PostgreSQL in tests/integration/store)."""
    store = SqlStore(url)
    vision = store.create_experiment(name="a", project="vision").id
    audio = store.create_experiment(name="b", project="audio").id
    gone = store.create_experiment(name="c", project="nlp").id
    registry = registry_store(store)
    registry.add_version("seen", _version(vision, None))  # first from vision, then from audio
    registry.add_version("seen", _version(audio, None))
    registry.add_version("orphan", _version(gone, "nlp"))  # its experiment deleted since
    registry.add_version("lost", _version("0" * 12, None))  # neither experiment nor lineage
    store.delete_experiment(gone)
    cfg = alembic_config()
    with store.engine.begin() as conn:  # as a store of before this revision kept them
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0012_quotas_project_quotas")
        command.upgrade(cfg, "head")
        rows = dict(conn.execute(text("SELECT name, project FROM registered_models")).all())
    assert rows == {"seen": "vision", "orphan": "nlp", "lost": "default"}
    assert {m.name: m.project for m in registry.list_models(["vision", "default"])} == {
        "seen": "vision",
        "lost": "default",
    }
    store.close()
