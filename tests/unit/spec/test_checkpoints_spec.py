"""run.checkpoints: the retention policy is read, dumped back, planned, and a bad one is refused
with where and how to fix it."""

from __future__ import annotations

import pytest

from phalanx.errors import SpecError
from phalanx.plan import build_plan
from phalanx.spec.dump import spec_to_yaml
from phalanx.spec.loader import load_spec_text

FILE = """version: 1
kind: experiment
run:
  cmd: python train.py
  checkpoints:
{policy}
"""


def test_a_policy_is_read_planned_and_dumped_back() -> None:
    spec = load_spec_text(FILE.format(policy="    keep_last: 3\n    keep_best: 1\n    metric: accuracy"))
    assert spec.checkpoints == {"keep_last": 3, "keep_best": 1, "metric": "accuracy"}
    assert build_plan(spec).to_json()["checkpoints"] == spec.checkpoints
    assert load_spec_text(spec_to_yaml(spec)).checkpoints == spec.checkpoints


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("    keep_best: 1", "run.checkpoints.keep_best: needs run.checkpoints.metric"),
        ("    keep_last: -2", "run.checkpoints.keep_last: expected a whole number >= 0"),
        ("    keep_lats: 2", "unknown key"),
        ("    mode: biggest\n    metric: acc", "run.checkpoints.mode: expected max or min"),
    ],
)
def test_a_bad_policy_names_the_key(policy: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_text(FILE.format(policy=policy), "p.yml")
    assert message in str(info.value), str(info.value)


def test_an_unknown_policy_key_is_one_problem_with_a_hint() -> None:
    """A typo in run.checkpoints is reported once (with the did-you-mean hint), not twice."""
    with pytest.raises(SpecError) as info:
        load_spec_text(FILE.format(policy="    keep_lst: 2"), "p.yml")
    text = str(info.value)
    assert text.count("keep_lst") == 1, text
    assert "did you mean 'keep_last'?" in text


def test_every_mistake_of_the_policy_is_said_in_one_pass() -> None:
    """A wrong mode and a keep_best without its metric: both at once, each at its line, not the
    second only after the first is fixed."""
    with pytest.raises(SpecError) as info:
        load_spec_text(FILE.format(policy="    keep_best: 1\n    mode: biggest"), "p.yml")
    assert [(p.line, p.path) for p in info.value.problems] == [
        (6, "run.checkpoints.keep_best"),
        (7, "run.checkpoints.mode"),
    ], str(info.value)
    # a refused keep_best is not also "keep_last: 0 would keep no checkpoint"
    with pytest.raises(SpecError) as info:
        load_spec_text(FILE.format(policy="    keep_best: -1\n    keep_last: 0"), "p.yml")
    assert [p.path for p in info.value.problems] == ["run.checkpoints.keep_best"], str(info.value)
