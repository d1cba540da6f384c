"""`phalanx run -f FILE --server URL [--follow]`: the command side of submitting to a server."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from phalanx.cli.launching import launched_json
from phalanx.config import Settings

if TYPE_CHECKING:
    from phalanx.apiclient import Client


def run_on_server(
    file: Path,
    param: list[str] | None,
    priority: int,
    server: str | None,
    follow: bool,
    token_file: Path | None,
    output: Any,
    given: Mapping[str, Any],
    settings: Settings,
    cluster: str | None = None,
    extra_params: bool = False,
) -> None:
    """Bundle the file's folder, submit, print the id; with ``follow``, exit as the experiment ends.
    ``cluster``: the submit's target, a cluster registered on the server (default: its own machine);
    ``extra_params``: params the file does not declare are recorded (`--extra-params`)."""
    from phalanx.bundles import pack
    from phalanx.errors import SpecError, UsageError
    from phalanx.logins import choose
    from phalanx.spec.group import is_group_file
    from phalanx.spec.loader import parse_param_overrides

    if server is None:
        raise UsageError(
            "--follow and --token-file go with --server URL (or `phalanx login URL`): the server to submit to"
        )
    local_only = [name for name, value in given.items() if value]
    if local_only:
        raise UsageError(
            f"{', '.join(local_only)}: not available on a server yet; the server at {server} runs the "
            "experiment from the file's folder on its own machine or on a cluster it has (--cluster NAME;"
            " --local runs it on this one)"
        )
    if not file.is_file():
        raise UsageError(f"{file}: no such file")
    params = parse_param_overrides(param or [])
    client = choose(server, False, token_file, settings)
    assert client is not None  # a server was named
    folder = file.resolve().parent
    bundle = pack(folder)
    on = f" for its cluster {cluster}" if cluster else ""
    sys.stderr.write(
        f"phalanx: submitting {file} with {folder} ({len(bundle) >> 10} KiB) to {client.url}{on}\n"
    )
    try:
        fields = {"target": cluster} if cluster else {}
        if extra_params:
            fields["extra_params"] = "true"
        answer = client.submit(file, bundle, params, priority, extra=fields)
    except SpecError as exc:  # the server's located words, then what `phalanx run` says of the file
        for problem in exc.problems:
            sys.stderr.write(f"{problem}\n")
        n = len(exc.problems)
        kind = "group file" if is_group_file(file) else "experiment file"
        sys.stderr.write(f"error: {file} is not a valid {kind} ({n} problem{'s' * (n != 1)})\n")
        raise typer.Exit(2) from None
    answer_submitted(client, str(answer["id"]), answer.get("kind") == "group", str(output) == "json", follow)


def answer_submitted(client: Client, exp_id: str, group: bool, as_json: bool, follow: bool) -> None:
    """What `phalanx run` and `rerun` print once the server has answered: the id (with -o json the
    document a run here prints), and with ``follow`` every replica's console (a group's trial
    states) until it ends, exiting with its status as a run here does."""
    from phalanx.cli.remote import follow as follow_logs
    from phalanx.cli.remote import follow_group

    if as_json and not follow and group:  # followed, the document comes once it has ended, as here
        emit_group(client, exp_id)
    elif as_json and not follow:
        emit_launched(client, exp_id)
    elif not as_json:
        typer.echo(exp_id)
    page = f"{client.url}/groups/{exp_id}" if group else f"{client.url}/experiments/{exp_id}"
    if not follow:
        sys.stderr.write(f"phalanx: open {page} to see it in the web UI\n")
        return
    try:
        if group:  # its trials' states on stderr; with -o json the group's document once it has ended
            code = follow_group(client, exp_id)
            if as_json:
                emit_group(client, exp_id)
        else:  # with -o json the console goes to stderr, as a local run's does: stdout is the document
            code = follow_logs(client, exp_id, sys.stderr if as_json else None)
            if as_json:
                emit_launched(client, exp_id)
    except KeyboardInterrupt:
        on = f"--server {client.url}"
        what, stop = (
            ("group", f"phalanx group stop {exp_id}") if group else ("experiment", f"phalanx stop {exp_id}")
        )
        again = (
            f"`phalanx group get {exp_id} {on}` shows"
            if group
            else f"`phalanx logs {exp_id} -f {on}` follows"
        )
        sys.stderr.write(
            f"\nphalanx: detached; {what} {exp_id} keeps running on {client.url}"
            f" (stop it with `{stop} {on}`; {again} it again)\n"
        )
        raise typer.Exit(130) from None
    raise typer.Exit(code)


def rerun_on_server(
    client: Client,
    origin: str,
    params: Mapping[str, Any],
    priority: int,
    attempt: int | None,
    extra_params: bool,
    output: Any,
    latest_data: bool = False,
    follow: bool = False,
) -> None:
    """`phalanx rerun ID` after `phalanx login` (or with --server URL): the server starts what its
    experiment ID ran, with these params, from its stored snapshot; prints the new id, and with
    ``follow`` follows it as `phalanx run --follow` does."""
    from phalanx.errors import UsageError

    if not origin.strip():  # as this machine's store says it
        raise UsageError("an experiment id is required")
    sys.stderr.write(f"phalanx: rerunning {origin} on {client.url}\n")
    answer = client.clone(
        origin, params, priority, attempt=attempt, extra_params=extra_params, latest_data=latest_data
    )
    answer_submitted(client, str(answer["id"]), False, str(output) == "json", follow)


def emit_launched(client: Client, experiment_id: str) -> None:
    """The `-o json` of a run, rerun or resume on a server: the document a local one prints
    (``launched_json``), its status and reason as the server holds them now."""
    from phalanx.cli.listing import emit_json
    from phalanx.remote_store import RemoteStore

    exp = RemoteStore(client).get_experiment(experiment_id)
    emit_json(launched_json(exp.id, str(exp.status), exp.reason, server=client.url))


def emit_group(client: Client, group_id: str) -> None:
    """The `-o json` of a group file run on a server: the group's document as the server holds it
    now (``group_json``, what `/groups/ID` answers), the one a run of it on this machine prints."""
    from phalanx.cli.listing import emit_json
    from phalanx.remote_store import RemoteStore

    emit_json(RemoteStore(client).group_view(group_id))


def resume_on_server(client: Client, experiment_id: str, output: Any) -> None:
    """`phalanx resume ID` after `phalanx login` (or with --server URL): the server resumes its
    experiment on its machine (``POST /experiments/{id}/resume``, answered once its supervisor has
    reopened it); prints the id, as `phalanx resume -d` does."""
    from phalanx.remote_store import RemoteStore

    sys.stderr.write(f"phalanx: resuming {experiment_id} on {client.url}\n")
    answer = RemoteStore(client).resume(experiment_id)
    if str(output) == "json":
        emit_launched(client, str(answer["id"]))
    else:
        typer.echo(answer["id"])
    sys.stderr.write(f"phalanx: open {client.url}/experiments/{answer['id']} to see it in the web UI\n")
