"""`phalanx metrics`' table and its answer to a series or title it does not have, on a door that
holds the scalars in memory (the store's, the lean reader's and a server's answer the same)."""

from __future__ import annotations

import math

import pytest

from phalanx.cli.metrics_output import print_metrics
from phalanx.domain import Series
from phalanx.errors import NotFound

NAN = math.nan


class Door:
    def __init__(self, data: dict[str, dict[str, Series]]) -> None:
        self.data = data

    def metrics(
        self, experiment_id: str, title: str | None = None, series: str | None = None
    ) -> dict[str, dict[str, Series]]:
        picked = {
            t: {s: v for s, v in by.items() if series in (None, s)}
            for t, by in self.data.items()
            if title in (None, t)
        }
        return {t: by for t, by in picked.items() if by}

    def metric_titles(self, experiment_id: str) -> dict[str, list[str]]:
        return {t: list(by) for t, by in self.data.items()}


def test_min_and_max_leave_nan_out_wherever_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    door = Door(
        {
            "loss": {
                "first": Series([0, 1, 2, 3], [NAN, 0.5, 0.2, 0.9]),
                "second": Series([0, 1, 2, 3], [0.5, NAN, 0.2, 0.9]),
                "all": Series([0, 1], [NAN, NAN]),
            }
        }
    )
    print_metrics(door, "e1", None, None, "table")
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [
        ["loss", "first", "4", "3", "0.9", "0.2", "0.9"],
        ["loss", "second", "4", "3", "0.9", "0.2", "0.9"],
        ["loss", "all", "2", "1", "nan", "nan", "nan"],
    ]


def test_an_unknown_series_is_answered_with_the_series_there_are() -> None:
    door = Door(
        {
            "loss": {"worker 00": Series([0], [1.0]), "worker 01": Series([0], [1.0])},
            "system/rss_mib": {"master": Series([0], [9.0])},
        }
    )
    with pytest.raises(NotFound) as err:
        print_metrics(door, "e1", None, "worker 02", "table")
    assert str(err.value) == (
        "experiment e1 has no metric series 'worker 02' (series: master, worker 00, worker 01)"
    )
    with pytest.raises(NotFound) as err:
        print_metrics(door, "e1", "loss", "master", "table")
    assert str(err.value) == "experiment e1 has no metric 'loss'/'master' (series: worker 00, worker 01)"
    # a title it does not have: its titles, as before
    with pytest.raises(NotFound) as err:
        print_metrics(door, "e1", "los", "master", "table")
    assert str(err.value) == "experiment e1 has no metric 'los'/'master' (titles: loss, system/rss_mib)"
