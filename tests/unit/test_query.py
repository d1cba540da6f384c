"""phalanx.search_experiments returns exactly the experiments a brute-force filter over what was
written keeps, with the asked columns' values, for any conjunction of param and metric conditions."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phalanx
from phalanx.config import Settings
from phalanx.errors import UsageError
from phalanx.store import open_store
from phalanx.store.base import Store
from phalanx.store.filters import FilterError
from tests.unit.server import fill

# Six times the default page (50) and enough of each case (no param, no metric, each project, equal
# values on the grid) for every drawn condition to keep and drop experiments; 1,000 proved no more and
# cost 4 s of a 1-minute `make unit`. Writing them (one commit each, as the product writes them) took
# up to 300 s for 1,000 at load 20 on 2 cores: the module fixture gets room beyond the default timeout.
N = 300
pytestmark = pytest.mark.timeout(900)
LRS = [0.1, 0.05, 0.01, 0.001]
OPS = ["=", "!=", "<", "<=", ">", ">="]


@dataclass(frozen=True)
class Written:
    id: str
    project: str
    lr: float | None  # None: no such param
    acc: tuple[float, ...]  # empty: no such metric


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, list[Written]]]:
    """N experiments in two projects, some without the param or the metric, values on a coarse grid
    so that equality conditions hit."""
    home = tmp_path_factory.mktemp("query-home")
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    rng = random.Random(28)
    written = []
    for i in range(N):
        project = "vision" if i % 3 else "text"
        e = fill.experiment(store, name=f"run{i}", project=project, n_workers=0)
        lr = rng.choice(LRS) if i % 7 else None
        if lr is not None:
            fill.param(store, e.id, "Args", "lr", lr)
        acc = tuple(rng.randrange(0, 21) / 20 for _ in range(rng.randrange(1, 4))) if i % 5 else ()
        if acc:
            fill.scalars(store, e.id, "val/acc", "master", acc)
        written.append(Written(e.id, project, lr, acc))
    yield store, written
    store.close()


def _value(w: Written, column: str) -> float | None:
    if column == "param:lr":
        return w.lr
    if not w.acc:
        return None
    return {
        "metric:max:val/acc": max(w.acc),
        "metric:min:val/acc": min(w.acc),
        "metric:last:val/acc": w.acc[-1],
    }[column]


def _holds(value: float | None, op: str, wanted: float) -> bool:
    if value is None:
        return op == "!="  # the run table's rule: a missing value differs from everything
    return {
        "=": value == wanted,
        "!=": value != wanted,
        "<": value < wanted,
        "<=": value <= wanted,
        ">": value > wanted,
        ">=": value >= wanted,
    }[op]


COLUMNS = ["param:lr", "metric:max:val/acc", "metric:min:val/acc", "metric:last:val/acc"]
THRESHOLDS = st.sampled_from([*LRS, 0.0, 0.25, 0.5, 0.55, 0.95, 1.0, 2.0]) | st.floats(-1, 2).map(
    lambda x: round(x, 3)
)
CONDITION = st.tuples(st.sampled_from(COLUMNS), st.sampled_from(OPS), THRESHOLDS)


@settings(max_examples=50)
@given(
    conditions=st.lists(CONDITION, max_size=3),
    project=st.sampled_from([None, "vision", "text"]),
    as_list=st.booleans(),
)
def test_search_returns_exactly_what_a_brute_force_filter_keeps(
    world: tuple[Store, list[Written]],
    conditions: list[tuple[str, str, float]],
    project: str | None,
    as_list: bool,
) -> None:
    store, written = world
    texts = [f"{c} {op} {v!r}" for c, op, v in conditions]
    where: Any = texts if as_list else " and ".join(texts)
    frame = phalanx.search_experiments(where or None, columns=COLUMNS, project=project, store=store)
    expected = {
        w.id
        for w in written
        if (project is None or w.project == project)
        and all(_holds(_value(w, c), op, v) for c, op, v in conditions)
    }
    assert set(frame["id"]) == expected
    assert len(frame) == len(expected)  # no experiment twice
    by_id = {w.id: w for w in written}
    for row in frame.head(20).to_dict("records"):
        for column in COLUMNS:
            want, value = _value(by_id[row["id"]], column), row[column]
            assert (want is None and (value is None or math.isnan(value))) or value == want, (column, row)


def test_the_frame_is_newest_first_with_the_experiment_fields(world: tuple[Store, list[Written]]) -> None:
    store, written = world
    frame = phalanx.search_experiments("param:lr = 0.1", columns=["param:lr"], project="text", store=store)
    assert list(frame.columns)[:4] == ["id", "name", "project", "status"]
    assert list(frame.columns)[-1] == "param:lr"
    assert set(frame["status"]) == {"succeeded"} and set(frame["project"]) == {"text"}
    assert list(frame["created_at"]) == sorted(frame["created_at"], reverse=True)
    assert len(frame) == sum(1 for w in written if w.project == "text" and w.lr == 0.1) > 0


def test_or_and_parentheses_mean_what_they_say(world: tuple[Store, list[Written]]) -> None:
    store, written = world
    frame = phalanx.search_experiments(
        "(param:lr = 0.1 or param:lr in (0.001)) and metric:max:val/acc >= 0.5", project="text", store=store
    )
    expected = {
        w.id for w in written if w.project == "text" and w.lr in (0.1, 0.001) and w.acc and max(w.acc) >= 0.5
    }
    assert set(frame["id"]) == expected and expected


def test_a_malformed_condition_or_column_says_how_to_write_it(world: tuple[Store, list[Written]]) -> None:
    store, _ = world
    with pytest.raises(FilterError, match="position 1: unknown column 'lr'"):
        phalanx.search_experiments("lr < 1", store=store)
    with pytest.raises(FilterError, match="position 12: expected 'and', 'or'"):
        phalanx.search_experiments("param:lr<1 || param:lr>2", store=store)
    with pytest.raises(UsageError, match="param:"):
        phalanx.search_experiments(columns=["lr"], store=store)
    with pytest.raises(UsageError, match="succeeded"):
        phalanx.search_experiments(status="done", store=store)


def test_search_without_a_store_reads_the_home_store(phalanx_home: Path) -> None:
    store = open_store(Settings(home=phalanx_home, db_url=None, artifacts_url=None))
    e = fill.experiment(store, name="only", n_workers=0)
    store.close()
    frame = phalanx.search_experiments()
    assert list(frame["id"]) == [e.id]


def test_a_rank_column_reads_only_that_ranks_series(tmp_path: Path) -> None:
    store = open_store(Settings(home=tmp_path, db_url=None, artifacts_url=None))
    e = fill.experiment(store, name="ddp", n_workers=1)
    fill.scalars(store, e.id, "loss", "master", [0.9, 0.5], replica="master")  # rank 0
    fill.scalars(store, e.id, "loss", "worker-0", [0.8, 0.7, 0.3], replica="worker-0")  # rank 1
    other = fill.experiment(store, name="single", n_workers=0)
    fill.scalars(store, other.id, "loss", "master", [0.2])
    columns = ["metric:last:loss@rank1", "metric:max:loss@rank0", "metric:min:loss", "metric:min:loss@rank7"]
    frame = phalanx.search_experiments("metric:min:loss@rank1 < 0.5", columns=columns, store=store)
    assert list(frame["id"]) == [e.id]  # `other` has no rank-1 series: its value is missing
    row = frame.iloc[0]
    assert (row[columns[0]], row[columns[1]], row[columns[2]]) == (0.3, 0.9, 0.3)
    assert row[columns[3]] is None or math.isnan(row[columns[3]])
    store.close()
