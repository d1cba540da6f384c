"""The tuning knobs (phalanx.knobs): typed, read at use, a malformed value refused with its name,
and docs/configuration.md listing exactly the knobs the table has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phalanx import knobs, stragglers
from phalanx.errors import UsageError
from phalanx.machine import limits
from phalanx.spec.model import Stall
from phalanx.supervisor.liveness import StallTimes

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_defaults_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for knob in knobs.KNOBS:
        monkeypatch.delenv(knob.env, raising=False)
    # the stall watchdog is on: named after 10 minutes, failed after 30 (judged only where the CPU is seen)
    assert StallTimes.of(Stall()) == StallTimes(notice=600.0, fail=1800.0, unseen_cpu=False)
    assert knobs.ALERT_COMMAND.value() is None and knobs.ALERT_URL.value() is None
    assert knobs.STORE_RETRY_SECONDS.value() == 30.0
    assert limits.max_replicas() == 1024
    assert knobs.DEFAULT_TORCH.value() == "2.13.0"
    assert knobs.WHEELS_DIR.value() is None
    knobs.check()


def test_values_read_at_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_HANG_TIMEOUT", "2.5")
    monkeypatch.setenv("PHALANX_MAX_REPLICAS", "4096")
    monkeypatch.setenv("PHALANX_STRAGGLER_THRESHOLD", "35")
    monkeypatch.setenv("PHALANX_WHEELS_DIR", "~/wheels")
    assert StallTimes.of(Stall()) == StallTimes(notice=600.0, fail=2.5, unseen_cpu=True)
    monkeypatch.setenv("PHALANX_STALL_NOTICE", "0")  # 0: off
    assert StallTimes.of(Stall()).notice is None
    # the file's run.stall_notice / run.hang_timeout win over the variables
    assert StallTimes.of(Stall(notice=60, fail=0)) == StallTimes(notice=60, fail=None, unseen_cpu=True)
    assert limits.max_replicas() == 4096
    assert stragglers._threshold() == 35.0
    assert knobs.WHEELS_DIR.value() == Path.home() / "wheels"


@pytest.mark.parametrize(
    ("env", "raw", "expects"),
    [
        ("PHALANX_HANG_TIMEOUT", "ten", "seconds >= 0"),
        ("PHALANX_HANG_TIMEOUT", "-1", "seconds >= 0"),
        ("PHALANX_HANG_TIMEOUT", "nan", "seconds >= 0"),
        ("PHALANX_STALL_NOTICE", "10m", "seconds >= 0"),
        ("PHALANX_ALERT_URL", "hooks.slack.com/x", "http(s) URL"),
        ("PHALANX_STORE_RETRY_SECONDS", "0", "seconds > 0"),
        ("PHALANX_MAX_REPLICAS", "1.5", "whole number of replicas"),
        ("PHALANX_MAX_REPLICAS", "0", "whole number of replicas"),
        ("PHALANX_SQLITE_CACHE_KIB", "64MB", "KiB"),
        ("PHALANX_MAX_PENDING_POINTS", "-3", "whole number of points"),
        ("PHALANX_STRAGGLER_THRESHOLD", "20%", "percentage"),
        ("PHALANX_DEFAULT_TORCH", "latest", "version"),
        ("PHALANX_SYSTEM_METRICS", "5s", "seconds > 0 between samples, or off"),
    ],
)
def test_a_malformed_knob_is_named(monkeypatch: pytest.MonkeyPatch, env: str, raw: str, expects: str) -> None:
    """Before, PHALANX_HANG_TIMEOUT=ten silently meant "off" and PHALANX_STRAGGLER_THRESHOLD=20%
    silently meant 20: a user who set one could not tell it was ignored."""
    monkeypatch.setenv(env, raw)
    with pytest.raises(UsageError) as caught:
        knobs.check()
    message = str(caught.value)
    assert message.startswith(f"{env}={raw!r}: expected ") and expects in message and "unset it" in message


def test_docs_list_every_knob() -> None:
    documented = set(re.findall(r"^\| `(PHALANX_[A-Z_]+)` \|", DOCS.read_text(), re.M))
    assert documented == {knob.env for knob in knobs.KNOBS}
