"""The run table's one filter grammar (store.filters): what the UI box, the API's where= and
`phalanx ls --where` all read."""

from __future__ import annotations

import pytest

from phalanx.errors import UsageError
from phalanx.store.filters import Condition, parse_filter, parse_filters


def test_and_joins_conditions_in_any_case() -> None:
    assert parse_filter("param:optimizer=adam and param:lr<0.001") == [
        Condition("param:optimizer", "=", "adam"),
        Condition("param:lr", "<", 0.001),
    ]
    assert parse_filter("  metric:max:val/acc >= 0.9   AND param:Args/bs != 64 ") == [
        Condition("metric:max:val/acc", ">=", 0.9),
        Condition("param:Args/bs", "!=", 64.0),
    ]


def test_quotes_keep_and_inside_a_value_and_keep_numbers_as_text() -> None:
    assert parse_filter("param:note = 'warm and cold' and param:tag=\"007\"") == [
        Condition("param:note", "=", "warm and cold"),
        Condition("param:tag", "=", "007"),
    ]
    # "and" inside a word is no separator
    assert parse_filter("param:optimizer=sandand") == [Condition("param:optimizer", "=", "sandand")]


def test_every_where_value_is_a_filter_and_all_of_them_hold() -> None:
    assert parse_filters(["param:a=1 and param:b=2", "param:c>3"]) == [
        Condition("param:a", "=", 1.0),
        Condition("param:b", "=", 2.0),
        Condition("param:c", ">", 3.0),
    ]
    assert parse_filter("") == [] and parse_filter("   ") == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("param:lr<0.1 and lr>1", "condition 2 of 2 ('lr>1')"),
        ("param:lr<0.1 and", "condition 2 is empty"),
        ("param:lr", "COLUMN OP VALUE"),
        ("param:lr>=", "no value after '>='"),
        ("metric:avg:loss<1", "metric:AGG:TITLE"),
    ],
)
def test_what_it_cannot_read_is_named(text: str, says: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_filter(text)
    assert says in str(err.value), str(err.value)


def test_conditions_compare_numbers_as_numbers_and_missing_values_fail_but_not_equal() -> None:
    lt = Condition("param:lr", "<", 0.001)
    assert lt.matches(0.0001) and lt.matches("0.0005") and not lt.matches(0.01)
    assert not lt.matches(None) and not lt.matches("adam")
    assert Condition("param:lr", "!=", 0.1).matches(None)
    assert Condition("param:opt", "=", "adam").matches("adam") and not Condition(
        "param:opt", "=", "adam"
    ).matches("sgd")
