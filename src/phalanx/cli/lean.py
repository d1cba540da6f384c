"""The lean door for the commands users type most: `phalanx ls`, `get ID`, `logs ID`, `metrics ID`,
`params ID`, `artifacts ID` and `run -f FILE` (in the foreground or `--detach`) without typer.

Typer (0.29) builds a pydantic TypeAdapter for every option it parses: a one-command Typer app costs
0.19 CPU-s before it does anything, the whole of issue 30's 0.2 CPU-s budget for `phalanx ls`. So
``main`` first offers the arguments to ``dispatch``: when they are a plain `phalanx ls`, `get ID`,
`logs ID`, `metrics ID`, `params ID`, `artifacts ID` (a listing) or `run -f FILE [--detach]` (options
it knows, values it accepts) it runs the command itself with argparse from the standard library; anything
else — `--help`, a typo, a value out of range, an option it does not know — returns None and the
Typer app answers exactly as before (its usage message, its exit status). The Typer commands stay
the definition: tests/unit/cli/test_lean_dispatch.py checks that the options here are theirs, with
their defaults. A foreground run ends with ``SystemExit`` and the experiment's status on both doors
(cli/foreground.py), which ``main`` takes as it takes Typer's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from phalanx.domain import Experiment
    from phalanx.store.lite import LiteReader


class _Refused(Exception):
    """argparse met something it does not accept: the Typer app answers instead."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # never print argparse's usage: Typer's is the real one
        raise _Refused(message)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # add_argument checks each metavar with a formatter, which asks shutil for the terminal's
        # width when given none (importing shutil, bz2 and lzma: 3 ms of every `phalanx ls`). This
        # parser prints no help, so any width does.
        return argparse.HelpFormatter(prog=self.prog, width=80)


def _ls_parser() -> _Parser:
    p = _Parser(prog="phalanx ls", add_help=False, allow_abbrev=False)
    p.add_argument("--status")
    p.add_argument("--project")
    p.add_argument("--search")
    p.add_argument("--limit", "-n", type=int)
    p.add_argument("--output", "-o", choices=("table", "json"))
    p.add_argument("--group")
    p.add_argument("--tag")
    p.add_argument("--where", action="append")  # the full store reads the summary for these
    p.add_argument("--column", action="append")
    return p


def _logged_in() -> bool:
    """After `phalanx login URL` commands go to that server by default: the Typer app decides."""
    from phalanx import logins
    from phalanx.config import Settings

    return logins.path(Settings().home).exists()


def _ls(ns: argparse.Namespace) -> bool:
    from phalanx.cli.listing import Format, ls_experiments

    if _logged_in():
        return False
    if ns.limit is not None and ns.limit < 1:
        return False  # Typer says how (`--limit`: 0 is not in the range x>=1)
    ls_experiments(
        status=ns.status,
        project=ns.project,
        search=ns.search,
        limit=50 if ns.limit is None else ns.limit,
        output=Format(ns.output or "table"),
        group=ns.group,
        tag=ns.tag,
        where=ns.where,
        columns=ns.column,
    )
    return True


def _run_parser() -> _Parser:
    """`phalanx run`'s options that a start on this machine may take, in the foreground or detached
    (--dry-run, --server, --local, --follow, --token-file and --experiment-id are left to Typer)."""
    p = _Parser(prog="phalanx run", add_help=False, allow_abbrev=False)
    p.add_argument("--file", "-f", required=True)
    p.add_argument("--param", action="append")
    p.add_argument("--extra-params", action="store_true")
    p.add_argument("--workdir")
    p.add_argument("--output", "-o", choices=("text", "json"))
    p.add_argument("--oversubscribe", action="store_true")
    p.add_argument("--cluster")
    p.add_argument("--detach", "-d", action="store_true")
    p.add_argument("--priority", type=int)
    p.add_argument("--no-wait", action="store_true")
    p.add_argument("--no-system-metrics", action="store_true")
    return p


def _run(ns: argparse.Namespace) -> bool:
    """A start on this machine: detached (``start_detached``) or supervised here to its end
    (``run_foreground``, which exits with the experiment's status). A login (its server runs it)
    and a group file are Typer's."""
    if _logged_in():
        return False
    try:  # a `kind: group` file (or one that may be): Typer's command runs the group
        with open(ns.file, "rb") as f:
            if b"group" in f.read(1 << 20):
                return False
    except OSError:
        return False  # Typer says what is wrong with the file
    import faulthandler
    import signal
    from pathlib import Path

    from phalanx.cli.foreground import run_foreground
    from phalanx.cli.launching import Output, start_detached
    from phalanx.cli.terminal import guard_std_streams

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: where is it stuck?
    guard_std_streams()  # `phalanx run ... | head`: a closed pipe ends the echo, not the experiment
    start = start_detached if ns.detach else run_foreground
    start(
        Path(ns.file),
        param=ns.param,
        extra_params=ns.extra_params,
        workdir=None if ns.workdir is None else Path(ns.workdir),
        oversubscribe=ns.oversubscribe,
        cluster=ns.cluster,
        priority=0 if ns.priority is None else ns.priority,
        no_wait=ns.no_wait,
        no_system_metrics=ns.no_system_metrics,
        output=Output(ns.output or "text"),
    )
    return True


def _logs_parser() -> _Parser:
    """`phalanx logs`'s options but --server and --local (a server's console: Typer's)."""
    p = _Parser(prog="phalanx logs", add_help=False, allow_abbrev=False)
    p.add_argument("experiment")
    p.add_argument("--replica", "-r")
    p.add_argument("--follow", "-f", action="store_true")
    p.add_argument("--output", "-o", choices=("text", "json"))
    return p


def _logs(ns: argparse.Namespace) -> bool:
    """What an experiment's consoles hold now, read by the lean reader when no upkeep is due (the
    full path would ingest the experiment's spool first: a live ingester's lines are at most its
    poll behind). Following: Typer's command answers."""
    if ns.follow:
        return False
    from phalanx.cli.console_lines import print_console
    from phalanx.views import check_console

    def answer(reader: LiteReader, experiment: Experiment) -> None:
        check_console(reader, experiment, ns.replica)
        print_console(reader, experiment.id, ns.replica, ns.output == "json", {})

    return _on_experiment(ns.experiment, answer)


def _metrics_parser() -> _Parser:
    """`phalanx metrics`'s options but --server and --local (a server's scalars: Typer's)."""
    p = _Parser(prog="phalanx metrics", add_help=False, allow_abbrev=False)
    p.add_argument("experiment_id")
    p.add_argument("--title")
    p.add_argument("--series")
    p.add_argument("--output", "-o", choices=("table", "json", "csv"))
    return p


def _metrics(ns: argparse.Namespace) -> bool:
    """An experiment's scalars read by the lean reader when no upkeep is due (as `phalanx logs`)."""
    from phalanx.cli.metrics_output import print_metrics

    def answer(reader: LiteReader, experiment: Experiment) -> None:
        print_metrics(reader, experiment.id, ns.title, ns.series, ns.output or "table")

    return _on_experiment(ns.experiment_id, answer)


def _params_parser() -> _Parser:
    """`phalanx params`'s options but --server and --local (a server's parameters: Typer's)."""
    p = _Parser(prog="phalanx params", add_help=False, allow_abbrev=False)
    p.add_argument("experiment_id")
    p.add_argument("--output", "-o", choices=("table", "json"))
    return p


def _params(ns: argparse.Namespace) -> bool:
    """An experiment's parameters read by the lean reader when no upkeep is due (as `phalanx logs`)."""
    from phalanx.cli.record_tables import print_params

    def answer(reader: LiteReader, experiment: Experiment) -> None:
        print_params(reader, experiment.id, ns.output or "table")

    return _on_experiment(ns.experiment_id, answer)


def _artifacts_parser() -> _Parser:
    """`phalanx artifacts`' listing options (--download, --dir, --server and --local: Typer's)."""
    p = _Parser(prog="phalanx artifacts", add_help=False, allow_abbrev=False)
    p.add_argument("experiment_id")
    p.add_argument("--output", "-o", choices=("table", "json"))
    p.add_argument("--kind")
    return p


def _artifacts(ns: argparse.Namespace) -> bool:
    """An experiment's artifacts listed by the lean reader when no upkeep is due (as `phalanx logs`)."""
    from phalanx.cli.record_tables import artifacts_of_kind, print_artifacts

    def answer(reader: LiteReader, experiment: Experiment) -> None:
        records = artifacts_of_kind(reader, experiment.id, ns.kind)
        print_artifacts(records, experiment.id, ns.kind, ns.output or "table")

    return _on_experiment(ns.experiment_id, answer)


def _get_parser() -> _Parser:
    """`phalanx get`'s options but --server and --local (a server's experiment: Typer's)."""
    p = _Parser(prog="phalanx get", add_help=False, allow_abbrev=False)
    p.add_argument("experiment_id")
    p.add_argument("--output", "-o", choices=("table", "json"))
    p.add_argument("--file", action="store_true")
    return p


def _get(ns: argparse.Namespace) -> bool:
    """One experiment in full read by the lean reader when no upkeep is due (as `phalanx logs`)."""
    from phalanx.cli.details import show_experiment
    from phalanx.cli.listing import Format

    def answer(reader: LiteReader, experiment: Experiment) -> None:
        show_experiment(reader, experiment.id, Format(ns.output or "table"), ns.file)

    return _on_experiment(ns.experiment_id, answer)


def _on_experiment(typed: str, answer: Callable[[LiteReader, Experiment], None]) -> bool:
    """``answer`` from the lean reader for the experiment ``typed`` names; False when Typer's
    command must answer: a login (a server's experiment), upkeep due, or an id the reader cannot
    tell alone (none, several, a group's name: the full store words those)."""
    if _logged_in():
        return False
    from phalanx.config import Settings
    from phalanx.readpass import open_lean

    reader = open_lean(Settings())
    if reader is None:
        return False
    with reader:
        experiment = reader.find_experiment(typed)
        if experiment is None:
            return False
        answer(reader, experiment)
    return True


# command -> (its parser, its runner: False when the Typer app must answer after all)
LEAN_COMMANDS: dict[str, tuple[Callable[[], _Parser], Callable[[argparse.Namespace], bool]]] = {
    "ls": (_ls_parser, _ls),
    "logs": (_logs_parser, _logs),
    "metrics": (_metrics_parser, _metrics),
    "params": (_params_parser, _params),
    "artifacts": (_artifacts_parser, _artifacts),
    "get": (_get_parser, _get),
    "run": (_run_parser, _run),
}


def parse(args: Sequence[str]) -> tuple[str, argparse.Namespace] | None:
    """The lean command and its parsed options, or None when the Typer app must answer."""
    if not args or args[0] not in LEAN_COMMANDS:
        return None
    rest = list(args[1:])
    if any(a in ("--help", "-h", "--") for a in rest):
        return None
    if any(a[:1] == "-" and a[2:3] == "=" and a[1:2] != "-" for a in rest):
        return None  # `-o=json`: Click takes "=json" as the value, argparse "json": Typer's answer
    make_parser, _ = LEAN_COMMANDS[args[0]]
    try:
        ns, extra = make_parser().parse_known_args(rest)
    except _Refused:
        return None
    if extra:
        return None
    return args[0], ns


def dispatch(args: Sequence[str]) -> bool:
    """Run `phalanx ARGS` here if it is a lean command; whether it ran. Phalanx errors propagate
    (``main`` maps them to messages and exit statuses as for every command)."""
    parsed = parse(args)
    if parsed is None:
        return False
    command, ns = parsed
    _, run = LEAN_COMMANDS[command]
    return run(ns)
