"""How often a replica's system series are sampled: PHALANX_SYSTEM_METRICS (knobs.SYSTEM_METRICS),
which `phalanx run --no-system-metrics` sets to "off" and a user may set to a number of seconds."""

from __future__ import annotations

import pytest

from phalanx.errors import UsageError, exit_status
from phalanx.machine.sysmetrics import DEFAULT_INTERVAL, interval_from_env


@pytest.mark.parametrize("value", ["0", "off", "OFF", " false ", "no"])
def test_off_values_turn_the_sampler_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PHALANX_SYSTEM_METRICS", value)
    assert interval_from_env() is None


@pytest.mark.parametrize(("value", "seconds"), [("2.5", 2.5), ("1", 1.0), ("0.2", 1.0), ("30", 30.0)])
def test_a_number_is_the_interval_and_one_second_is_the_shortest(
    monkeypatch: pytest.MonkeyPatch, value: str, seconds: float
) -> None:
    monkeypatch.setenv("PHALANX_SYSTEM_METRICS", value)
    assert interval_from_env() == seconds


@pytest.mark.parametrize("value", [None, "", "  "])
def test_unset_is_the_default_interval(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("PHALANX_SYSTEM_METRICS", raising=False)
    else:
        monkeypatch.setenv("PHALANX_SYSTEM_METRICS", value)
    assert interval_from_env() == DEFAULT_INTERVAL == 5.0


@pytest.mark.parametrize("value", ["often", "5s", "-1", "nan"])
def test_an_unreadable_value_is_refused_with_its_name_not_taken_as_the_default(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Before, PHALANX_SYSTEM_METRICS=5s silently sampled every 5 s and =often every 5 s too."""
    monkeypatch.setenv("PHALANX_SYSTEM_METRICS", value)
    with pytest.raises(UsageError) as caught:
        interval_from_env()
    assert str(caught.value).startswith(f"PHALANX_SYSTEM_METRICS={value!r}: expected seconds > 0")
    assert exit_status(caught.value) == 2
