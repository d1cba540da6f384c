"""phalanx.metrics_frame: many experiments' series as one long DataFrame, a row per stored point."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import phalanx
from phalanx.config import Settings
from phalanx.errors import NotFound
from phalanx.store import open_store
from phalanx.store.base import Store
from tests.unit.server import fill


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(Settings(home=tmp_path / "home", db_url=None, artifacts_url=None))
    yield s
    s.close()


def test_one_row_per_point_of_every_asked_series(store: Store) -> None:
    a = fill.experiment(store, name="a", project="p", n_workers=0)
    b = fill.experiment(store, name="b", project="p", n_workers=0)
    fill.scalars(store, a.id, "loss", "rank 0", [0.9, 0.5, 0.2])
    fill.scalars(store, a.id, "loss", "rank 1", [0.8, 0.4])
    fill.scalars(store, a.id, "acc", "rank 0", [0.1])
    fill.scalars(store, b.id, "loss", "rank 0", [0.7])
    df = phalanx.metrics_frame([a.id, b.id[:6]], ["loss"], store=store)
    assert list(df.columns) == ["experiment_id", "title", "series", "step", "value", "time"]
    got = sorted(zip(df.experiment_id, df.series, df.step, df.value, strict=True))
    assert got == sorted(
        [
            (a.id, "rank 0", 0, 0.9),
            (a.id, "rank 0", 1, 0.5),
            (a.id, "rank 0", 2, 0.2),
            (a.id, "rank 1", 0, 0.8),
            (a.id, "rank 1", 1, 0.4),
            (b.id, "rank 0", 0, 0.7),  # a prefix of an id names the experiment
        ]
    )
    assert set(phalanx.metrics_frame([a.id], store=store).title) == {"loss", "acc"}  # every title
    small = phalanx.metrics_frame([a.id], ["loss"], max_points=100, store=store)
    assert sorted(zip(small.series, small.step, small.value, strict=True)) == sorted(
        (s, st, v) for e, s, st, v in got if e == a.id
    )  # few points: the summary holds them all
    assert phalanx.metrics_frame([a.id], ["nothing"], store=store).empty


def test_an_unknown_id_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        phalanx.metrics_frame(["0123456789ab"], store=store)
