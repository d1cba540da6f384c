"""`--param name=value` overrides: parsing, and filling placeholders the file does or does not declare."""

from __future__ import annotations

import pytest

from phalanx.errors import SpecError, UsageError
from phalanx.plan import build_plan
from phalanx.spec.loader import load_spec_text, parse_param_overrides

FILE = (
    "version: 1\nkind: experiment\nparams: {lr: 0.1, epochs: 5}\n"
    "run: {cmd: 'python x.py --lr={{ lr }} --epochs={{ epochs }}'}\n"
)


@pytest.mark.parametrize(
    ("arg", "value"),
    [
        ("lr=0.01", 0.01),
        ("epochs=3", 3),
        ("flag=true", True),
        ("name=resnet", "resnet"),
        ("empty=", ""),
        ("quoted='5'", "5"),
        ("nothing=null", None),
        ("spaced=a b", "a b"),
        ("eq=a=b", "a=b"),
        ("list=[1, 2]", [1, 2]),  # JSON
        ('mapping={"a": 1}', {"a": 1}),
        ("id=0123", "0123"),
        ("date=2020-01-01", "2020-01-01"),
        ("broken='open", "'open"),
    ],
)
def test_values_are_read_as_yaml_scalars(arg: str, value: object) -> None:
    name = arg.split("=", 1)[0]
    assert parse_param_overrides([arg]) == {name: value}


def test_a_later_argument_wins() -> None:
    assert parse_param_overrides(["a=1", "a=2"]) == {"a": 2}


@pytest.mark.parametrize("arg", ["lr", "=1", "1lr=2", "my-lr=3", " =4"])
def test_bad_syntax_is_a_usage_error_naming_the_argument(arg: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_param_overrides([arg])
    assert repr(arg) in str(err.value)
    assert not isinstance(err.value, SpecError)


def test_overrides_replace_the_files_params() -> None:
    spec = load_spec_text(FILE, "f.yml", params=parse_param_overrides(["lr=0.5"]))
    assert spec.params == {"lr": 0.5, "epochs": 5}
    assert build_plan(spec).command == "python x.py --lr=0.5 --epochs=5"


def test_an_override_may_fill_a_placeholder_the_file_does_not_declare() -> None:
    text = "version: 1\nkind: experiment\nrun: {cmd: 'python x.py --seed={{ seed }}'}\n"
    with pytest.raises(SpecError, match="unknown placeholder"):
        load_spec_text(text, "f.yml")
    spec = load_spec_text(text, "f.yml", params={"seed": 7})
    assert build_plan(spec).command == "python x.py --seed=7"


def test_an_override_of_an_unused_name_is_refused_unless_extras_are_asked_for() -> None:
    with pytest.raises(SpecError, match=r"--param lrr: .*did you mean 'lr'\?.*--extra-params"):
        load_spec_text(FILE, "f.yml", params={"lrr": 0.5})
    spec = load_spec_text(FILE, "f.yml", params={"note": "baseline"}, extra_params=True)
    assert spec.params["note"] == "baseline"


@pytest.mark.parametrize("arg", ["m={a: 1}", "l=[a, b]", "m={'a': 1}"])
def test_a_list_or_mapping_must_be_json(arg: str) -> None:
    with pytest.raises(UsageError, match="must be JSON"):
        parse_param_overrides([arg])


def test_booleans_are_written_as_yaml_spells_them() -> None:
    spec = load_spec_text(FILE, "f.yml", params={"lr": True})
    assert build_plan(spec).command == "python x.py --lr=true --epochs=5"


def test_build_plan_params_override_too() -> None:
    spec = load_spec_text(FILE, "f.yml")
    assert build_plan(spec, {"epochs": 1}).command == "python x.py --lr=0.1 --epochs=1"


def test_a_placeholder_never_closed_is_a_located_error_and_braces_of_code_are_not() -> None:
    """`{{ lr }` used to run as written, its param never used (Polyaxon's Jinja refused it)."""
    head = "version: 1\nkind: experiment\nparams: {lr: 0.1}\nrun:\n  cmd: "
    with pytest.raises(SpecError) as err:
        load_spec_text(head + "python x.py --lr={{ lr }} --wd={{ lr\n", "f.yml")
    assert [str(p) for p in err.value.problems] == [
        "f.yml:5:39: run.cmd: placeholder '{{ lr' is never closed: write {{ name }}"
    ]
    code = load_spec_text(head + "python -c 'd={1:{2:3}}; print(d)' --lr={{ lr }}\n", "f.yml")
    assert build_plan(code).command == "python -c 'd={1:{2:3}}; print(d)' --lr=0.1"
