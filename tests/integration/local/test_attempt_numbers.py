"""An attempt number past the last attempt is told as such: `phalanx rerun ID --attempt 5` and
`phalanx diff ID@5` on an experiment with only attempt 0 say there is no attempt 5 and which there
are (exit 2), not that attempt 5 "recorded no code of its own". `phalanx diff ID` on an experiment
of one attempt says there is nothing to compare (exit 0), not "diff ID@0 ID@0 / no differences"."""

from __future__ import annotations

import json

import pytest
from tests.support.cli import phalanx_cli

from .conftest import Phalanx

SPEC = "version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n"


@pytest.fixture
def one_attempt(phalanx: Phalanx) -> str:
    done = phalanx.run("run", "-f", str(phalanx.spec(SPEC)), "-o", "json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


@pytest.mark.parametrize(
    "args", [("rerun", "{id}", "--attempt", "5"), ("diff", "{id}@5"), ("diff", "{id}@0", "{id}@5")]
)
def test_an_attempt_that_does_not_exist_is_named(one_attempt: str, args: tuple[str, ...]) -> None:
    done = phalanx_cli(*(a.format(id=one_attempt) for a in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"error: experiment {one_attempt} has no attempt 5; its only attempt is 0"
        f" (`phalanx get {one_attempt}` lists them)"
    )


def test_diff_of_an_experiment_of_one_attempt_says_there_is_nothing_to_compare(one_attempt: str) -> None:
    done = phalanx_cli("diff", one_attempt)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"experiment {one_attempt} has one attempt only: nothing to compare"
        f" (`phalanx diff {one_attempt} OTHER` compares it with another experiment)\n"
    )
