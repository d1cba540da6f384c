"""What scripts read from `phalanx metrics/params/get -o json`: strict JSON (no NaN/Infinity) and
every rank's value of a hyperparameter the ranks disagree on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phalanx.cli.app import app
from phalanx.cli.main import _register
from phalanx.config import Settings
from phalanx.domain import Event, EventKind
from phalanx.store import open_store

CLI = CliRunner()
_register()


def _strict_json(text: str) -> object:
    def refuse(token: str) -> None:
        raise AssertionError(f"not strict JSON: {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def exp_id(phalanx_home: Path) -> str:
    store = open_store(Settings())
    exp = store.create_experiment(name="ranks", project="qa").id

    def ev(kind: EventKind, data: dict[str, object], replica: str, rank: int, seq: int) -> Event:
        return Event(exp, kind, data, replica=replica, rank=rank, time=float(seq), stream="s", seq=seq)

    points = [
        ["loss", "worker 00", i, v, 1.0] for i, v in enumerate([0.5, math.nan, math.inf, -math.inf, 0.25])
    ]
    store.write_events(
        [
            ev(EventKind.SCALAR, {"points": points}, "master", 0, 1),
            ev(EventKind.PARAM, {"section": "Args", "values": {"lr": 0.1, "rank": 0}}, "master", 0, 2),
            ev(EventKind.PARAM, {"section": "Args", "values": {"lr": 0.1, "rank": 1}}, "worker-0", 1, 3),
            ev(EventKind.PARAM, {"section": "Args", "values": {"lr": 0.1, "rank": 2}}, "worker-0", 2, 4),
        ]
    )
    store.close()
    return exp


def test_metrics_json_writes_null_for_nan_and_infinity_and_keeps_finite_values_exact(exp_id: str) -> None:
    done = CLI.invoke(app, ["metrics", exp_id, "-o", "json"])
    assert done.exit_code == 0, done.output
    doc = _strict_json(done.stdout)
    assert doc == {"loss": {"worker 00": {"steps": [0, 1, 2, 3, 4], "values": [0.5, None, None, None, 0.25]}}}


def test_params_json_keeps_every_ranks_value_when_ranks_differ(exp_id: str) -> None:
    done = CLI.invoke(app, ["params", exp_id, "-o", "json"])
    assert done.exit_code == 0, done.output
    assert _strict_json(done.stdout) == {
        "Args": {
            "lr": 0.1,  # every rank agrees: one value, as before
            "rank": {
                "per_replica": [
                    {"replica": "master", "rank": 0, "value": 0},
                    {"replica": "worker-0", "rank": 1, "value": 1},
                    {"replica": "worker-0", "rank": 2, "value": 2},
                ]
            },
        }
    }
    table = CLI.invoke(app, ["params", exp_id]).stdout
    assert [line.split()[:5] for line in table.splitlines() if " rank " in f" {line} "] == [
        ["Args", "rank", "0", "master", "0"],
        ["Args", "rank", "1", "worker-0", "1"],
        ["Args", "rank", "2", "worker-0", "2"],
    ]
    get = CLI.invoke(app, ["get", exp_id, "-o", "json"])
    assert _strict_json(get.stdout)["params"]["Args"]["rank"]["per_replica"][2]["value"] == 2  # type: ignore[index]
    assert (
        "rank = 0 (master rank 0), 1 (worker-0 rank 1), 2 (worker-0 rank 2)"
        in CLI.invoke(app, ["get", exp_id]).stdout
    )
