"""How often a replica's system series are sampled: PHALANX_SYSTEM_METRICS, which `phalanx run
--no-system-metrics` sets to "off" and a user may set to a number of seconds."""

from __future__ import annotations

import pytest

from phalanx.machine.sysmetrics import DEFAULT_INTERVAL, interval_from_env


@pytest.mark.parametrize("value", ["0", "off", "OFF", " false ", "no"])
def test_off_values_turn_the_sampler_off(value: str) -> None:
    assert interval_from_env({"PHALANX_SYSTEM_METRICS": value}) is None


@pytest.mark.parametrize(("value", "seconds"), [("2.5", 2.5), ("1", 1.0), ("0.2", 1.0), ("30", 30.0)])
def test_a_number_is_the_interval_and_one_second_is_the_shortest(value: str, seconds: float) -> None:
    assert interval_from_env({"PHALANX_SYSTEM_METRICS": value}) == seconds


@pytest.mark.parametrize("env", [{}, {"PHALANX_SYSTEM_METRICS": ""}, {"PHALANX_SYSTEM_METRICS": "often"}])
def test_unset_or_unreadable_is_the_default_interval(env: dict[str, str]) -> None:
    assert interval_from_env(env) == DEFAULT_INTERVAL
