"""phalanx.suggest: the nearest choice to a misspelt word."""

from __future__ import annotations

from phalanx.suggest import closest, distance


def test_two_neighbouring_letters_swapped_are_one_step() -> None:
    assert distance("prdo", "prod") == 1
    assert distance("alais", "alias") == 1
    assert distance("kitten", "sitting") == 3  # still Levenshtein otherwise
    assert closest("prdo", ["prod", "staging"]) == "prod"
    assert closest("staging", ["prod"]) is None
