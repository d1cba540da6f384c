"""The run table's one filter grammar (store.filters): what the UI box, the API's where=,
`phalanx ls --where` and search_experiments all read. What it cannot read is refused with the
position and what was expected, never read as something else."""

from __future__ import annotations

import pytest

from phalanx.store.filters import AllOf, AnyOf, Condition, FilterError, Literal, parse_filter, parse_filters


def conditions(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.column, c.op, tuple(v.text for v in c.values)) for c in parse_filter(text).conditions()]


def test_and_binds_tighter_than_or_and_parentheses_group() -> None:
    flat = parse_filter("param:a=1 or param:b=2 and param:c=3").root
    assert isinstance(flat, AnyOf) and isinstance(flat.parts[1], AllOf)
    grouped = parse_filter("(param:a=1 OR param:b=2) AND param:c=3").root
    assert isinstance(grouped, AllOf) and isinstance(grouped.parts[0], AnyOf)
    row = {"param:a": 1, "param:c": 4}
    assert parse_filter("param:a=1 or param:b=2 and param:c=3").matches(row)
    assert not parse_filter("(param:a=1 or param:b=2) and param:c=3").matches(row)


def test_values_are_one_word_or_quoted_text_and_numbers_keep_their_text() -> None:
    assert conditions("param:note = 'warm and cold' and param:tag=\"007\"") == [
        ("param:note", "=", ("warm and cold",)),
        ("param:tag", "=", ("007",)),
    ]
    (c,) = parse_filter("metric:max:val/acc>=9e-1").conditions()
    assert c.values == (Literal("9e-1", 0.9, 21),)
    assert conditions("param:optimizer=sandand") == [("param:optimizer", "=", ("sandand",))]
    assert conditions("param:a==1") == [("param:a", "=", ("1",))]
    assert conditions("param:opt in (adam, 'sgd m') and param:x not in (1)") == [
        ("param:opt", "in", ("adam", "sgd m")),
        ("param:x", "not in", ("1",)),
    ]
    assert conditions("'metric:last:train loss' < 1") == [("metric:last:train loss", "<", ("1",))]


def test_repeated_wheres_all_hold_and_nothing_is_no_condition() -> None:
    both = parse_filters(["param:a=1 or param:b=2", "param:c>3"])
    assert isinstance(both.root, AllOf) and len(both.conditions()) == 3
    assert parse_filter("").root is None and parse_filters(["  ", ""]).root is None


# each: the text, the position (1-based) named, and words of what was expected there
MALFORMED = [
    ("param:lr<<0.001", 10, "expected a value"),
    ("param:lr<", 10, "found the end of the filter"),
    ("param:a=1 && param:b=2", 11, "(write and)"),
    ("param:a=1 || param:b=2", 11, "(write or)"),
    ("param:a=1, param:b=2", 10, "join conditions with and / or"),
    ("param:note=warm and cold", 21, "unknown column 'cold'"),
    ("lr<0.001", 1, "did you mean param:lr or metric:last:lr?"),
    ("metric:avg:loss<1", 1, "metric:AGG:TITLE"),
    ("metric:max:acc > abc", 18, "'abc' is text: write a number"),
    ("param:a=and", 9, "quote a keyword"),
    ("param:a in adam", 12, "expected '(' after 'in'"),
    ("param:a in (1 2)", 15, "expected ',' or ')'"),
    ("param:a not (1)", 13, "expected 'in'"),
    ("(param:a=1", 11, "expected ')' closing the '(' at position 1"),
    ("param:a=1)", 10, "expected 'and', 'or' or the end"),
    ("param:a=1 and", 14, "expected a column"),
    ("or param:a=1", 1, "expected a column"),
    ("param:x='open", 9, "never closed"),
    ("param:a ! 1", 9, "'!' is not part of the grammar"),
    ("param:a", 8, "expected an operator"),
    ("()", 2, "expected a column"),
]


@pytest.mark.parametrize(("text", "position", "says"), MALFORMED)
def test_what_it_cannot_read_is_refused_at_its_position(text: str, position: int, says: str) -> None:
    with pytest.raises(FilterError) as err:
        parse_filter(text)
    assert err.value.position == position, str(err.value)
    assert f"position {position}:" in str(err.value) and says in str(err.value), str(err.value)


def test_comparisons_are_typed_by_the_cell() -> None:
    lt = Condition("param:lr", "<", (Literal("0.001", 0.001, 1),), 1)
    assert lt.matches(0.0001) and lt.matches("0.0005") and not lt.matches(0.01)
    assert not lt.matches(None) and not lt.matches("adam")
    ne = Condition("param:lr", "!=", (Literal("0.1", 0.1, 1),), 1)
    assert ne.matches(None) and ne.matches("adam") and not ne.matches(0.1)
    text = parse_filter("param:tag = 007").conditions()[0]
    assert text.matches("007") and text.matches(7) and not text.matches("7.5")
    assert parse_filter("param:flag = true").matches({"param:flag": True})
    assert not parse_filter("param:opt = adam").matches({"param:opt": 3})
    assert parse_filter("param:opt not in (adam)").matches({})


def test_select_refuses_a_column_nobody_has_with_a_hint() -> None:
    flt = parse_filter("param:lr_rate < 0.1")
    names = {"params": ["lr", "lr_rate_x", "momentum"], "metrics": ["loss"]}
    with pytest.raises(FilterError) as err:
        flt.select(["a"], {"a": {}}, lambda: names)
    assert "no experiment has param:lr_rate" in str(err.value) and "param:lr_rate_x" in str(err.value)
    # some experiment elsewhere has it: no match here, not a mistake
    assert parse_filter("param:momentum>0").select(["a"], {"a": {}}, lambda: names) == []
    assert parse_filter("param:nothing>0").select([], {}, lambda: names) == []  # nothing to filter


def test_select_refuses_text_against_a_param_that_is_a_number_everywhere() -> None:
    values = {"a": {"param:lr": 0.1}, "b": {"param:lr": 0.01}, "c": {}}
    with pytest.raises(FilterError) as err:
        parse_filter("param:lr > abc").select(["a", "b", "c"], values)
    assert err.value.position == 12 and "param:lr is a number in every experiment" in str(err.value)
    assert parse_filter("param:lr > 0.05 or param:lr != 0.01").select(["a", "b", "c"], values) == ["a", "c"]
    mixed = {"a": {"param:bs": 32}, "b": {"param:bs": "auto"}}
    assert parse_filter("param:bs = auto").select(["a", "b"], mixed) == ["b"]
