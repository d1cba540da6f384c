"""The lean door (cli/lean.py) takes exactly the options of the Typer commands it stands in for, and
leaves to Typer everything it does not take whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

import phalanx.cli.run
import phalanx.cli.tracking  # noqa: F401  (registers `ls` on the app)
from phalanx import logins
from phalanx.cli import lean
from phalanx.cli.app import app
from phalanx.cli.main import COMMAND_MODULE, COMMAND_MODULES, modules_for


def _typer_options(command: str) -> dict[str, object]:
    group = typer.main.get_command(app)
    cmd = group.commands[command]  # type: ignore[attr-defined]
    return {"/".join(sorted(p.opts)): p.default for p in cmd.params}


def test_lean_ls_takes_the_options_of_the_typer_ls_with_its_defaults() -> None:
    typer_opts = _typer_options("ls")
    parser = lean.LEAN_COMMANDS["ls"][0]()
    lean_opts = {"/".join(sorted(a.option_strings)) for a in parser._actions}
    # --server/--local (a server's store) are Typer's: the lean door reads this machine's only
    left_to_typer = {"--server", "--local"}
    assert lean_opts == set(typer_opts) - left_to_typer, (
        "a new `ls` option: teach cli/lean.py or let Typer take it"
    )
    for option in (["--server", "http://x"], ["--local"]):
        assert lean.parse(["ls", *option]) is None, option
    _, ns = lean.parse(["ls"]) or ("", None)
    assert ns is not None
    assert {k: v for k, v in vars(ns).items() if v is not None} == {}
    assert typer_opts["--limit/-n"] == 50 and str(typer_opts["--output/-o"]) == "table"


def test_lean_run_takes_a_subset_of_the_typer_run_options_with_its_defaults() -> None:
    typer_opts = _typer_options("run")
    parser = lean.LEAN_COMMANDS["run"][0]()
    lean_opts = {"/".join(sorted(a.option_strings)): a.default for a in parser._actions}
    assert set(lean_opts) <= set(typer_opts)
    for name, default in lean_opts.items():  # argparse's None/False stand for Typer's defaults
        assert default in (None, False) and typer_opts[name] in (None, False, 0, "text"), name
    parsed = lean.parse(["run", "-f", "a.yml", "-d", "--param", "x=1", "--param", "y=2", "--priority", "3"])
    assert parsed is not None
    _, ns = parsed
    assert (ns.file, ns.detach, ns.param, ns.priority) == ("a.yml", True, ["x=1", "y=2"], 3)
    parsed = lean.parse(["run", "-f", "a.yml", "-o", "json", "--no-wait"])  # a run supervised here
    assert parsed is not None
    _, ns = parsed
    assert (ns.file, ns.detach, ns.output, ns.no_wait) == ("a.yml", False, "json", True)
    for args in (
        ["run", "-f", "a.yml", "--detach", "--dry-run"],
        ["run", "-f", "a.yml", "--detach", "--server", "http://x"],
        ["run", "-f", "a.yml", "--detach", "-o", "yaml"],
        ["run", "--detach"],  # no file: Typer's "Missing option '-f'"
        ["run", "-f", "a.yml", "--dry-run"],
        ["run", "-f", "a.yml", "-o", "yaml", "--dry-run"],
        ["run", "-f", "a.yml", "--local"],  # Typer's ("on this machine" said)
        ["run", "-f", "a.yml", "--follow"],
        ["run", "-f", "a.yml", "--experiment-id", "0123456789ab"],
        ["run", "-f", "a.yml", "--priority", "high"],  # Typer says how
    ):
        assert lean.parse(args) is None, args


def test_lean_run_leaves_a_login_and_a_group_file_to_typer(
    phalanx_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the foreground as detached: after `phalanx login` the server runs it, and a group file is
    `phalanx group run`'s; Typer's command decides both."""

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the lean door started it")

    monkeypatch.setattr("phalanx.cli.foreground.run_foreground", started)
    monkeypatch.setattr("phalanx.cli.launching.start_detached", started)
    group = tmp_path / "group.yml"
    group.write_text("version: 1\nkind: group\n")
    experiment = tmp_path / "e.yml"
    experiment.write_text("version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n")
    for detach in ([], ["--detach"]):
        assert lean.dispatch(["run", "-f", str(group), *detach]) is False
        assert lean.dispatch(["run", "-f", str(tmp_path / "missing.yml"), *detach]) is False  # Typer says
    logins.save(phalanx_home, logins.Login("http://127.0.0.1:9", "t" * 16))
    for detach in ([], ["--detach"]):
        assert lean.dispatch(["run", "-f", str(experiment), *detach]) is False


def test_lean_logs_takes_the_options_of_the_typer_logs_but_the_servers() -> None:
    typer_opts = _typer_options("logs")
    parser = lean.LEAN_COMMANDS["logs"][0]()
    lean_opts = {"/".join(sorted(a.option_strings)): a.default for a in parser._actions if a.option_strings}
    assert set(lean_opts) == set(typer_opts) - {"--server", "--local", "experiment"}, (
        "a new `logs` option: teach cli/lean.py or let Typer take it"
    )
    for name, default in lean_opts.items():  # argparse's None/False stand for Typer's defaults
        assert default in (None, False) and typer_opts[name] in (None, False, "text"), name
    parsed = lean.parse(["logs", "abc", "-r", "worker-1", "-o", "json"])
    assert parsed is not None
    assert (parsed[1].experiment, parsed[1].replica, parsed[1].output) == ("abc", "worker-1", "json")
    for args in (
        ["logs"],  # no id: Typer's "Missing argument 'ID'"
        ["logs", "abc", "--server", "http://x"],
        ["logs", "abc", "--local"],
        ["logs", "abc", "-o", "yaml"],  # Typer's command says how
        ["logs", "abc", "def"],
        ["logs", "abc", "--help"],
    ):
        assert lean.parse(args) is None, args


def test_lean_metrics_takes_the_options_of_the_typer_metrics_but_the_servers() -> None:
    typer_opts = _typer_options("metrics")
    parser = lean.LEAN_COMMANDS["metrics"][0]()
    lean_opts = {"/".join(sorted(a.option_strings)): a.default for a in parser._actions if a.option_strings}
    assert set(lean_opts) == set(typer_opts) - {"--server", "--local", "experiment_id"}, (
        "a new `metrics` option: teach cli/lean.py or let Typer take it"
    )
    for name, default in lean_opts.items():  # argparse's None stands for Typer's defaults
        assert default is None and typer_opts[name] in (None, "table"), name
    parsed = lean.parse(["metrics", "abc", "--title", "loss", "--series", "worker 00", "-o", "csv"])
    assert parsed is not None
    assert (parsed[1].experiment_id, parsed[1].title, parsed[1].series, parsed[1].output) == (
        "abc",
        "loss",
        "worker 00",
        "csv",
    )
    for args in (["metrics"], ["metrics", "abc", "--local"], ["metrics", "abc", "-o", "yaml"]):
        assert lean.parse(args) is None, args


def test_lean_ls_parses_what_a_user_types() -> None:
    parsed = lean.parse(["ls", "-n", "3", "--output=json", "--status", "running", "--tag", "t"])
    assert parsed is not None
    _, ns = parsed
    assert (ns.limit, ns.output, ns.status, ns.tag) == (3, "json", "running", "t")


def test_typer_answers_help_mistakes_and_other_commands() -> None:
    for args in (
        ["ls", "--help"],
        ["ls", "-h"],
        ["ls", "--bogus"],
        ["ls", "stray"],
        ["ls", "-n", "x"],
        ["ls", "-o", "yaml"],
        ["ls", "--lim", "3"],  # click would not take an abbreviation either: Typer says so
        ["ls", "-o=json"],  # click's value is "=json" (refused), argparse's "json": Typer says so
        ["logs", "abc", "-r=master"],  # click's replica is "=master" (none such)
        ["stop", "abc"],  # a command the lean door does not take
        ["--help"],
        [],
    ):
        assert lean.parse(args) is None, args


def test_every_command_is_imported_from_the_module_that_registers_it() -> None:
    for name in COMMAND_MODULES:
        __import__(name)
    group = typer.main.get_command(app)
    registered = set(group.commands)  # type: ignore[attr-defined]
    assert registered == set(COMMAND_MODULE), "add the new command to cli/main.py COMMAND_MODULE"
    for command, module in COMMAND_MODULE.items():
        callback = group.commands[command].callback  # type: ignore[attr-defined]
        if callback is not None and module != "phalanx.cli.app":
            assert callback.__module__ == module, command
    assert modules_for(["ls", "-n", "2"]) == ("phalanx.cli.tracking",)
    # a command group's subcommands may come from a second module: the one named imports the first
    __import__(modules_for(["cluster", "map"])[0])
    cluster = typer.main.get_command(app).commands["cluster"]  # type: ignore[attr-defined]
    assert {"add", "map", "maps"} <= set(cluster.commands)
    assert modules_for(["--help"]) == COMMAND_MODULES
    assert modules_for(["lss"]) == COMMAND_MODULES  # Typer's "No such command" lists them all


def test_lean_params_and_artifacts_take_the_listing_options_of_the_typer_commands() -> None:
    for command, leaves in (
        ("params", {"--server", "--local", "experiment_id"}),
        ("artifacts", {"--server", "--local", "experiment_id", "--download", "--dir/-d"}),
    ):
        typer_opts = _typer_options(command)
        parser = lean.LEAN_COMMANDS[command][0]()
        given = [a for a in parser._actions if a.option_strings]
        lean_opts = {"/".join(sorted(a.option_strings)): a.default for a in given}
        assert set(lean_opts) == set(typer_opts) - leaves, f"a new `{command}` option: teach cli/lean.py"
        for name, default in lean_opts.items():  # argparse's None stands for Typer's defaults
            assert default is None and typer_opts[name] in (None, "table"), (command, name)
    parsed = lean.parse(["artifacts", "abc", "--kind", "report", "-o", "json"])
    assert parsed is not None and (parsed[1].kind, parsed[1].output) == ("report", "json")
    for args in (
        ["params"],
        ["params", "abc", "--server", "http://x"],
        ["params", "abc", "-o", "csv"],
        ["artifacts", "abc", "--download", "model.pt"],  # a download: Typer's (the full store's files)
        ["artifacts", "abc", "-d", "out"],
        ["artifacts", "abc", "--local"],
    ):
        assert lean.parse(args) is None, args


def test_lean_get_takes_the_options_of_the_typer_get_but_the_servers() -> None:
    typer_opts = _typer_options("get")
    parser = lean.LEAN_COMMANDS["get"][0]()
    lean_opts = {"/".join(sorted(a.option_strings)): a.default for a in parser._actions if a.option_strings}
    assert set(lean_opts) == set(typer_opts) - {"--server", "--local", "experiment_id"}, (
        "a new `get` option: teach cli/lean.py"
    )
    assert (lean_opts["--output/-o"], typer_opts["--output/-o"]) == (None, "table")  # None: Typer's default
    assert lean_opts["--file"] is typer_opts["--file"] is False
    parsed = lean.parse(["get", "abc", "--file", "-o", "json"])
    assert parsed is not None and (parsed[1].experiment_id, parsed[1].file, parsed[1].output) == (
        "abc",
        True,
        "json",
    )
    for args in (
        ["get"],
        ["get", "abc", "--server", "http://x"],
        ["get", "abc", "--local"],
        ["get", "abc", "-o", "csv"],
    ):
        assert lean.parse(args) is None, args
