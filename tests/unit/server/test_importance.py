"""Param importance for a set of runs: η² as the group page computes it, off the request path
(the first ask starts it, a later one gets it) and cached by the runs' values."""

from __future__ import annotations

import threading

import pytest

from phalanx.server import importance


def test_eta_squared_is_the_share_of_variance_a_param_explains() -> None:
    # two groups by value: means 1 and 3 around 2, no spread inside: all the variance
    assert importance.eta_squared([("a", 1.0), ("a", 1.0), ("b", 3.0), ("b", 3.0)]) == pytest.approx(1.0)
    assert importance.eta_squared([("a", 1.0), ("b", 1.0), ("a", 3.0), ("b", 3.0)]) == pytest.approx(0.0)
    assert importance.eta_squared([(1, 2.0)]) == 0.0  # one point: nothing to explain
    # numbers: sqrt(4) = 2 bins of equal count along the sorted values
    assert importance.eta_squared([(0.1, 1.0), (0.2, 1.0), (0.3, 3.0), (0.4, 3.0)]) == pytest.approx(1.0)


def test_the_first_ask_starts_the_computation_and_a_later_one_gets_it() -> None:
    rows = [
        ({"lr": 0.1, "opt": "adam"}, 0.9),
        ({"lr": 0.01, "opt": "sgd"}, 0.5),
        ({"lr": 0.001, "opt": "sgd"}, 0.4),
    ]
    key, first = importance.importance("metric:max:acc-unit", ["lr", "opt"], rows)
    assert first is None  # never computed on the request path
    done = threading.Event()
    for _ in range(200):  # bounded: the worker answers in milliseconds
        again_key, found = importance.importance("metric:max:acc-unit", ["lr", "opt"], rows)
        if found is not None:
            done.set()
            break
        done.wait(0.05)
    assert done.is_set() and again_key == key
    assert found == {
        "lr": pytest.approx(importance.eta_squared([(0.1, 0.9), (0.01, 0.5), (0.001, 0.4)])),
        "opt": pytest.approx(importance.eta_squared([("adam", 0.9), ("sgd", 0.5), ("sgd", 0.4)])),
    }
    other, _ = importance.importance(
        "metric:max:acc-unit", ["lr", "opt"], [*rows[:2], ({"lr": 0.001, "opt": "sgd"}, 0.41)]
    )
    assert other != key  # a new result is a new key: computed again, not served stale
