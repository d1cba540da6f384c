"""run.stall_notice / run.hang_timeout: the stall watchdog's times per experiment are read, planned,
dumped back, and a bad one is refused with where and how to fix it."""

from __future__ import annotations

import pytest

from phalanx.errors import SpecError
from phalanx.plan import build_plan
from phalanx.spec.dump import spec_to_yaml
from phalanx.spec.loader import load_spec_text
from phalanx.spec.model import Stall

FILE = """version: 1
kind: experiment
run:
  cmd: python train.py
{times}
"""


def test_the_times_are_read_planned_and_dumped_back() -> None:
    spec = load_spec_text(FILE.format(times="  stall_notice: 120\n  hang_timeout: 0"))
    assert spec.stall == Stall(notice=120.0, fail=0.0)  # 0: off, kept apart from "not given"
    assert build_plan(spec).stall == spec.stall
    assert load_spec_text(spec_to_yaml(spec)).stall == spec.stall


def test_left_out_they_are_left_to_the_variables_and_defaults() -> None:
    spec = load_spec_text(FILE.format(times=""))
    assert spec.stall == Stall(notice=None, fail=None)
    assert "stall_notice" not in spec_to_yaml(spec) and "hang_timeout" not in spec_to_yaml(spec)


@pytest.mark.parametrize(
    ("times", "message"),
    [
        ("  hang_timeout: -5", "run.hang_timeout: must be 0 (off) or more seconds, got -5"),
        ("  stall_notice: ten", "run.stall_notice"),
    ],
)
def test_a_bad_time_names_the_key_and_its_line(times: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_text(FILE.format(times=times), "p.yml")
    assert message in str(info.value)
    assert "p.yml:5" in str(info.value)
