"""The run table's filter, over the API, against a brute-force evaluation: for random filters
(and/or, parentheses, in lists, every operator, numbers, words and quoted text) over random runs
(numbers, text, booleans, mixed columns, metrics, missing values), the API's rows are exactly the
runs the filter's meaning (docs/run-table.md) keeps, and a filter that must be refused (a column
no run has, text against a number column) is a 400 naming a position."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.store.base import Store
from tests.unit.server import fill

NUMBERS = ["0.01", "0.1", "0.5", "16", "32", "007", "-1", "1e-2"]
WORDS = ["adam", "sgd", "auto", "true", "false", "007x"]
QUOTED = ["'adam'", "'0.1'", "'warm and cold'", '"sgd"']
COLUMNS = [
    "param:lr",
    "param:opt",
    "param:bs",
    "param:flag",
    "metric:max:acc",
    "metric:last:acc",
    "param:ghost",
]
OPS = ["=", "!=", "<", "<=", ">", ">="]
_projects = itertools.count()


@dataclass(frozen=True)
class Lit:
    source: str  # as typed

    @property
    def text(self) -> str:
        return self.source[1:-1] if self.source[0] in "'\"" else self.source

    @property
    def number(self) -> float | None:
        return float(self.source) if self.source in NUMBERS else None


@dataclass(frozen=True)
class Cond:
    column: str
    op: str
    values: tuple[Lit, ...]

    def render(self) -> str:
        if self.op in ("in", "not in"):
            return f"{self.column} {self.op} ({', '.join(v.source for v in self.values)})"
        return f"{self.column} {self.op} {self.values[0].source}"


@dataclass(frozen=True)
class Join:
    word: str  # "and" / "or"
    parts: tuple[Any, ...]

    def render(self) -> str:
        return f" {self.word} ".join(
            f"({p.render()})" if isinstance(p, Join) else p.render() for p in self.parts
        )


# mostly values of the column's own type, now and then another (which must then be refused)
NUMERIC = {"param:lr", "metric:max:acc", "metric:last:acc"}


def literals(column: str) -> st.SearchStrategy[Lit]:
    fitting = NUMBERS if column in NUMERIC else NUMBERS + WORDS + QUOTED
    return st.one_of(st.sampled_from(fitting), st.sampled_from(fitting), st.sampled_from(WORDS + QUOTED)).map(
        Lit
    )


def condition(column: str) -> st.SearchStrategy[Cond]:
    return st.one_of(
        st.builds(Cond, st.just(column), st.sampled_from(OPS), st.tuples(literals(column))),
        st.builds(
            Cond,
            st.just(column),
            st.sampled_from(["in", "not in"]),
            st.lists(literals(column), min_size=1, max_size=3).map(tuple),
        ),
    )


conds = st.sampled_from(COLUMNS + COLUMNS[:-1] * 3).flatmap(condition)  # a column nobody has: now and then
filters = st.recursive(
    conds,
    lambda inner: st.builds(
        Join, st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=3).map(tuple)
    ),
    max_leaves=4,
)
runs = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "lr": st.sampled_from([0.001, 0.01, 0.1, 0.5]),
            "opt": st.sampled_from(["adam", "sgd", "007", "0.1"]),
            "bs": st.sampled_from([16, 32, "auto"]),
            "flag": st.booleans(),
            "acc": st.lists(st.sampled_from([0.1, 0.5, 0.9, 1.0]), min_size=1, max_size=3),
        },
    ),
    min_size=1,
    max_size=6,
)


# --- the brute force: the meaning, written out plainly ---------------------------------------


def cells(run: dict[str, Any]) -> dict[str, Any]:
    row = {f"param:{k}": v for k, v in run.items() if k != "acc"}
    if "acc" in run:
        row["metric:max:acc"] = max(run["acc"])
        row["metric:last:acc"] = run["acc"][-1]
    return row


def is_number(cell: Any) -> bool:
    return isinstance(cell, int | float) and not isinstance(cell, bool)


def compare(cell: Any, op: str, lit: Lit) -> bool:
    if cell is None:
        return op == "!="
    if isinstance(cell, bool):
        cell = "true" if cell else "false"
    if is_number(cell) or (lit.number is not None and re.fullmatch(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?", cell)):
        if lit.number is None:
            return op == "!="
        left, right = float(cell), lit.number
    else:
        left, right = cell, lit.text
    return {"=": left == right, "!=": left != right, "<": left < right, "<=": left <= right,
            ">": left > right, ">=": left >= right}[op]  # fmt: skip


def holds(node: Any, row: dict[str, Any]) -> bool:
    if isinstance(node, Join):
        results = [holds(p, row) for p in node.parts]
        return all(results) if node.word == "and" else any(results)
    cell = row.get(node.column)
    if node.op == "in":
        return any(compare(cell, "=", v) for v in node.values)
    if node.op == "not in":
        return not any(compare(cell, "=", v) for v in node.values)
    return compare(cell, node.op, node.values[0])


def leaves(node: Any) -> list[Cond]:
    return [c for p in node.parts for c in leaves(p)] if isinstance(node, Join) else [node]


def refused(node: Any, rows: list[dict[str, Any]]) -> bool:
    for c in leaves(node):
        present = [r[c.column] for r in rows if c.column in r]
        text = any(v.number is None for v in c.values)
        if c.column.startswith("metric:") and text:
            return True
        if not present:
            return True  # no run of the project has it
        if text and all(is_number(v) for v in present):
            return True
    return False


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=runs, flt=filters)
def test_the_api_keeps_exactly_the_rows_the_filter_means(
    client: TestClient, store: Store, runs: list[dict[str, Any]], flt: Any
) -> None:
    project = f"p{next(_projects)}"  # each example its own runs
    rows: dict[str, dict[str, Any]] = {}
    for run in runs:
        e = fill.experiment(store, project=project)
        for key, value in run.items():
            if key == "acc":
                fill.scalars(store, e.id, "acc", "master", value)
            else:
                fill.param(store, e.id, "Args", key, value)
        rows[e.id] = cells(run)
    text = flt.render()
    r = client.get("/api/v1/experiments", params={"project": project, "where": text, "limit": 500})
    if refused(flt, list(rows.values())):
        assert r.status_code == 400, (text, r.json())
        assert re.search(r"position \d+:", r.json()["message"]), r.json()
        return
    assert r.status_code == 200, (text, r.json())
    wanted = {i for i, row in rows.items() if holds(flt, row)}
    assert {e["id"] for e in r.json()["items"]} == wanted, text
