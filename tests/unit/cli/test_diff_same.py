"""`phalanx diff X X` (one experiment twice, or one attempt twice) says there is nothing to compare,
exit 0, on both doors, as `phalanx diff X` of one attempt does: it printed a diff of X with itself,
its `not compared: X recorded no ...` line twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.store import open_store
from phalanx.store.base import Store
from tests.support.cli import phalanx_cli
from tests.unit.cli.conftest import TOKEN, Served
from tests.unit.server import fill


def test_one_experiment_twice_is_nothing_to_compare_on_both_doors(door: Store) -> None:
    exp = fill.experiment(door, n_workers=0)
    said = (
        f"both sides are experiment {exp.id}: nothing to compare"
        f" (`phalanx diff {exp.id} OTHER` compares it with another experiment)\n"
    )
    for sides in ((exp.id, exp.id), (exp.id, exp.id[:6])):  # a prefix names the same one
        done = phalanx_cli("diff", *sides)
        assert (done.returncode, done.stdout) == (0, said), done.stderr
    doc = json.loads(phalanx_cli("diff", exp.id, exp.id, "-o", "json").stdout)  # a script's document
    assert doc["a"] == doc["b"] == exp.id and not doc["params"] and not doc["file"]


def test_one_experiment_twice_on_a_server_named_by_url_hints_that_server(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHALANX_TOKEN", TOKEN)
    exp = fill.experiment(served.store, n_workers=0)
    done = phalanx_cli("diff", exp.id, exp.id, "--server", served.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"both sides are experiment {exp.id}: nothing to compare"
        f" (`phalanx diff {exp.id} OTHER --server {served.url}` compares it with another experiment)\n"
    )


def test_one_attempt_twice_is_nothing_to_compare_and_two_attempts_are_named_apart(phalanx_home: Path) -> None:
    """On this machine only: a server compares experiments, never attempts (ID@N is refused there)."""
    store = open_store(Settings())
    exp = fill.experiment(store, n_workers=0)
    store.set_repro(exp.id, {"attempts": [{"attempt": 0, "git": {"commit": "a"}}, {"attempt": 1}]})
    store.close()
    same = phalanx_cli("diff", f"{exp.id}@1", f"{exp.id}@1")
    assert (same.returncode, same.stdout.splitlines()[0]) == (
        0,
        f"both sides are attempt 1 of experiment {exp.id}: nothing to compare"
        f" (`phalanx diff {exp.id} OTHER` compares it with another experiment)",
    ), same.stderr
    apart = phalanx_cli("diff", f"{exp.id}@0", f"{exp.id}@1")
    assert apart.returncode == 0, apart.stderr
    assert [line.split(" (")[0] for line in apart.stdout.splitlines()] == [
        f"diff {exp.id}@0 {exp.id}@1",
        f"not compared: {exp.id}@0 recorded no environment, source snapshot",
        f"not compared: {exp.id}@1 recorded no environment, source snapshot",
    ]
