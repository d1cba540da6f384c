"""`phalanx models`: the registry's verbs, and `phalanx models ID` still listing an experiment's
saved models as before the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("onnxruntime")

from phalanx.cli.app import app
from phalanx.cli.main import _register
from phalanx.config import Settings
from phalanx.store import open_store
from tests.support.cli import phalanx_cli
from tests.support.onnx_models import random_linear, record_model, tamper

CLI = CliRunner()
_register()


def _phalanx(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The exit status and stderr of `phalanx ARGS` through the real entry point (its error mapping)."""
    from phalanx.cli.main import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(list(args))
    return int(done.value.code or 0), capsys.readouterr().err


# what issue 26 records of an experiment's dataset input (plan["inputs"])
DATA = {"name": "digits", "kind": "dataset", "ref": "digits-data@3", "digest": "ab" * 32, "mode": "download"}


def _saved(seed: int) -> str:
    store = open_store(Settings())
    exp = store.create_experiment(name=f"train-{seed}", project="p", plan={"inputs": [DATA]}).id
    record_model(store, exp, "digits", random_linear(seed))
    return exp


def test_experiment_models_still_list_and_download(phalanx_home: Path, tmp_path: Path) -> None:
    exp = _saved(1)
    listed = CLI.invoke(app, ["models", exp[:6]])
    assert listed.exit_code == 0, listed.output
    assert "digits.onnx" in listed.output and "passed" in listed.output
    as_json = CLI.invoke(app, ["models", "-o", "json", exp])
    assert json.loads(as_json.output)[0]["name"] == "digits.onnx"
    got = CLI.invoke(app, ["models", exp, "--download", "digits.onnx", "-d", str(tmp_path)])
    assert got.exit_code == 0, got.output
    assert (tmp_path / "digits.onnx").is_file()


def test_register_alias_get_ls_download(phalanx_home: Path, tmp_path: Path) -> None:
    first, second = _saved(1), _saved(2)
    out = CLI.invoke(app, ["models", "register", first, "--name", "digits", "--tag", "team=vision"])
    assert out.exit_code == 0, out.output
    assert "registered digits version 1" in out.output and "passed" in out.output
    out = CLI.invoke(app, ["models", "register", f"{second}/digits", "-n", "digits", "--alias", "prod"])
    assert "version 2" in out.output and "digits@prod -> 2" in out.output
    out = CLI.invoke(app, ["models", "alias", "digits@prod", "1"])
    assert out.exit_code == 0 and "(was 2)" in out.output
    doc = json.loads(CLI.invoke(app, ["models", "get", "digits@prod", "-o", "json"]).output)
    assert (doc["version"], doc["experiment_id"], doc["aliases"]) == (1, first, ["prod"])
    assert doc["tags"] == {"team": "vision"}
    text = CLI.invoke(app, ["models", "get", "digits@prod"]).output
    assert "input: float32[?, 64]" in text and first in text
    assert f"digits: digits-data@3 ({'ab' * 6})" in text  # the data the version was trained on
    assert doc["lineage"]["inputs"] == [DATA]
    assert "@prod=1" in CLI.invoke(app, ["models", "ls"]).output
    versions = CLI.invoke(app, ["models", "ls", "digits"]).output.splitlines()
    assert [line.split()[0] for line in versions] == ["VERSION", "1", "2"]
    out = CLI.invoke(app, ["models", "download", "digits@prod", "-d", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "digits-v1.onnx").is_file()


def test_tampered_model_is_refused_with_the_parity_figure(
    phalanx_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _saved(1)
    tamper(open_store(Settings()), exp, "digits")
    status, err = _phalanx(capsys, "models", "register", exp, "--name", "digits")
    assert status == 2
    assert "fails its parity check (max abs diff" in err
    assert "Traceback" not in err
    assert "no registered models" in CLI.invoke(app, ["models", "ls"]).output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["models", "alias", "digits", "1"], "give NAME@ALIAS"),
        (["models", "alias", "digits@prod"], "give the version"),
        (["models", "get", "nothing@prod"], "no registered model 'nothing'"),
        (["models", "get", "bad name"], "model name"),
        (["models", "register", "abc", "--name", "x", "--tag", "novalue"], "KEY=VALUE"),
    ],
)
def test_mistakes_exit_2_with_a_message(
    phalanx_home: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    status, err = _phalanx(capsys, *args)
    assert status == 2, err
    assert message in err and "Traceback" not in err


def test_replicas_are_asked_of_a_server_only() -> None:
    done = phalanx_cli("serve", "digits@prod", "--replicas", "2")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "error: --replicas is a service's, on a server (--on-server); here --workers serves more at once\n"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--cpu", "2"],
            "error: --cpu, --memory and --gpu are what a served model takes of the server's machine",
        ),
        (["--on-server", "--memory", "2Gb"], "error: --cpu/--memory: '2Gb': unknown unit 'Gb'"),
        (["--on-server", "--cpu", "0"], "error: --cpu and --memory take a positive size"),
    ],
)
def test_a_served_models_resources_are_asked_of_a_server_and_must_be_sizes(
    args: list[str], said: str
) -> None:
    done = phalanx_cli("serve", "digits@prod", *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(said), done.stderr


def test_a_misspelt_alias_names_the_alias_meant(
    phalanx_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = CLI.invoke(app, ["models", "register", _saved(1), "--name", "digits", "--alias", "prod"])
    assert out.exit_code == 0, out.output
    status, err = _phalanx(capsys, "models", "get", "digits@prdo")
    assert status == 2
    assert err == "error: model digits has no alias 'prdo' (aliases: prod); did you mean digits@prod?\n"
    status, err = _phalanx(capsys, "models", "get", "digits@staging")  # near none: setting it is the fix
    assert status == 2 and "set one with `phalanx models alias digits@staging VERSION`" in err


def _removable(capsys: pytest.CaptureFixture[str]) -> None:
    """digits versions 1 and 2 (@prod -> 1), and lin version 1."""
    for seed, name in ((1, "digits"), (2, "digits"), (3, "lin")):
        assert _phalanx(capsys, "models", "register", _saved(seed), "--name", name)[0] == 0
    assert _phalanx(capsys, "models", "alias", "digits@prod", "1")[0] == 0


def test_rm_removes_a_version_with_its_aliases_or_a_whole_model(
    phalanx_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _removable(capsys)
    assert "rm" in CLI.invoke(app, ["models", "--help"]).output
    status, err = _phalanx(capsys, "models", "rm", "digits@1")  # no terminal: --yes or nothing
    assert (status, err) == (2, "error: removing digits@1 needs confirmation: pass --yes\n")
    with monkeypatch.context() as patched:
        patched.setattr("phalanx.cli.app.on_terminal", lambda: True)  # on a terminal: asked
        declined = CLI.invoke(app, ["models", "rm", "digits@1"], input="n\n")
    assert declined.exit_code == 1 and "digits@1 @prod" in declined.output
    assert [
        v["version"] for v in json.loads(CLI.invoke(app, ["models", "ls", "digits", "-o", "json"]).output)
    ] == [1, 2]
    out = CLI.invoke(app, ["models", "rm", "digits@1", "--yes"])
    assert out.exit_code == 0, out.output
    assert out.output == "removed digits@1; aliases removed: digits@prod\n"
    listed = {m["name"]: m for m in json.loads(CLI.invoke(app, ["models", "ls", "-o", "json"]).output)}
    assert (listed["digits"]["latest_version"], listed["digits"]["aliases"]) == (2, {})
    out = CLI.invoke(app, ["models", "rm", "lin", "-y", "-o", "json"])
    assert out.exit_code == 0, out.output
    assert [(v["ref"], v["source"]) for v in json.loads(out.output)] == [("lin@1", "digits.onnx")]
    assert [m["name"] for m in json.loads(CLI.invoke(app, ["models", "ls", "-o", "json"]).output)] == [
        "digits"
    ]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["lin@7"], "error: model lin has no version 7 (versions: 1)\n"),
        (["digts"], "did you mean 'digits'?"),
        (["nothing"], "no registered model 'nothing'"),
        (["digits@prod"], "rm takes NAME or NAME@VERSION, not an alias"),
    ],
)
def test_rm_of_what_does_not_exist_says_so_and_removes_nothing(
    phalanx_home: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    _removable(capsys)
    status, err = _phalanx(capsys, "models", "rm", *args, "--yes")
    assert status == 2 and said in err and "Traceback" not in err, err
    assert "experiment" not in err  # not routed to the hidden `models experiment ID`
    listed = {
        m["name"]: m["latest_version"]
        for m in json.loads(CLI.invoke(app, ["models", "ls", "-o", "json"]).output)
    }
    assert listed == {"digits": 2, "lin": 1}
