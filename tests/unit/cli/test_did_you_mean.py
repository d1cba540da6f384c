"""A misspelt word on the command line is answered with the word meant (exit 2, no traceback): a
`phalanx models` verb, a dataset's name, an artifact kind, a choice of -o."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.domain import EventKind
from phalanx.store import catalog, open_store
from tests.support.cli import phalanx_cli
from tests.unit.server import fill


def test_a_misspelt_models_verb_is_not_read_as_an_experiment_id(phalanx_home: Path) -> None:
    done = phalanx_cli("models", "regster", "0123abcd", "--name", "digits")
    assert done.returncode == 2
    assert "No such command 'regster'. Did you mean 'register'?" in done.stderr, done.stderr
    # an id (hex), or a word near no verb, is still an experiment's
    assert "no experiment 'abcdef'" in phalanx_cli("models", "abcdef").stderr
    assert "no experiment 'zzz'" in phalanx_cli("models", "zzz").stderr


def test_data_ls_of_a_misspelt_dataset_names_the_one_meant(phalanx_home: Path, tmp_path: Path) -> None:
    (tmp_path / "digits").mkdir()
    (tmp_path / "digits" / "train.csv").write_text("1,2\n")
    store = open_store(Settings())
    catalog.add_dataset(store, "digits", str(tmp_path / "digits"))
    store.close()
    done = phalanx_cli("data", "ls", "digitz")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "error: no dataset 'digitz'; did you mean 'digits'?\n"
    done = phalanx_cli("data", "ls", "other", "-o", "json")
    assert done.returncode == 2
    assert done.stderr == "error: no dataset 'other'; record one with `phalanx data add other PATH`\n"
    assert "digits@1" in phalanx_cli("data", "ls", "digits").stdout


@pytest.fixture
def with_reports(phalanx_home: Path) -> str:
    store = open_store(Settings())
    exp = fill.experiment(store).id
    for name, kind in (("a", "json"), ("r", "report")):
        data = {"name": name, "kind": kind, "path": f"artifacts/{name}", "size": 2, "content_type": "x/y"}
        store.write_events([fill.event(exp, EventKind.ARTIFACT, data)])
    store.close()
    return exp


def test_an_unknown_artifact_kind_is_a_usage_error_naming_the_nearest(with_reports: str) -> None:
    done = phalanx_cli("artifacts", with_reports, "--kind", "reprt")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(
        "error: --kind 'reprt': no artifact is of that kind; did you mean 'report'?"
    )
    assert f"experiment {with_reports} has json, report;" in done.stderr
    # a kind the SDK writes that this experiment has none of is an empty answer
    done = phalanx_cli("artifacts", with_reports, "--kind", "image")
    assert done.returncode == 0 and "has no artifacts of kind 'image'" in done.stdout
    assert phalanx_cli("artifacts", with_reports, "--kind", "report", "-o", "json").returncode == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("data", "ls", "-o", "xml"),
            "Invalid value for '-o' / '--output': 'xml' is not one of 'table', 'json'\n",
        ),
        (("data", "ls", "-o", "jsn"), "'jsn' is not one of 'table', 'json'; did you mean 'json'?\n"),
        (("check", "-f", "x.yml", "-o", "xml"), "'xml' is not one of 'table', 'json'\n"),
        (("run", "-f", "x.yml", "-o", "xml"), "'xml' is not one of 'text', 'json', 'yaml'\n"),
        (("metrics", "abc", "-o", "xml"), "'xml' is not one of 'table', 'json', 'csv'\n"),
        # logs has no yaml: its -o lists only what it prints (it listed yaml, then refused it)
        (("logs", "abc", "-o", "csv"), "'csv' is not one of 'text', 'json'\n"),
        (("logs", "abc", "-o", "yaml"), "'yaml' is not one of 'text', 'json'\n"),
        (
            ("server", "--log-level", "loud"),
            "'loud' is not one of 'critical', 'error', 'warning', 'info', 'debug'\n",
        ),
    ],
)
def test_an_unknown_choice_lists_the_choices_without_pydantics_prefix(
    phalanx_home: Path, args: tuple[str, ...], said: str
) -> None:
    done = phalanx_cli(*args)
    assert done.returncode == 2
    assert done.stderr.endswith(said), done.stderr
    assert "Value error" not in done.stderr and "Traceback" not in done.stderr


def test_gc_refuses_a_negative_age_instead_of_removing_a_starting_runs_folder(phalanx_home: Path) -> None:
    """`--min-age` keeps the folders younger than it (a run just starting has one): below 0 it
    would keep none of them."""
    starting = phalanx_home / "runs" / "0123456789ab"
    starting.mkdir(parents=True)
    done = phalanx_cli("gc", "--min-age", "-5")
    assert done.returncode == 2 and "--min-age" in done.stderr and "Traceback" not in done.stderr
    assert starting.is_dir()
