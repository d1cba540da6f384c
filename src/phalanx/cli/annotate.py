"""`phalanx tag`, `phalanx note` and `phalanx reports`: what the user keeps on an experiment, and
what its scripts reported as text (``report_text``)."""

from __future__ import annotations

from typing import Annotated

import typer

from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import emit_json
from phalanx.cli.target import LocalOpt, ServerOpt
from phalanx.cli.tracking import Format, IdArg, open_target


@app.command("tag")
def tag(
    experiment_id: IdArg,
    tags: Annotated[list[str] | None, typer.Argument(metavar="TAG...", help="tags to add")] = None,
    remove: Annotated[
        list[str] | None, typer.Option("--remove", "-r", metavar="TAG", help="a tag to remove")
    ] = None,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Add (or --remove) tags of an experiment; without any, list its tags."""
    from phalanx.errors import UsageError
    from phalanx.suggest import did_you_mean

    store = open_target(server, local)
    e = store.get_experiment(experiment_id)
    absent = [t for t in remove or [] if t not in e.tags]
    if absent:  # a typo removed nothing and said nothing; now nothing changes and it says why
        has = ", ".join(e.tags) if e.tags else "none"
        raise UsageError(
            f"--remove {absent[0]}: experiment {e.id} has no tag {absent[0]!r}"
            f"{did_you_mean(absent[0], e.tags)} (its tags: {has}); nothing changed"
        )
    if tags or remove:
        gone = set(remove or [])
        e = store.annotate(e.id, tags=[t for t in [*e.tags, *(tags or [])] if t not in gone])
    typer.echo(" ".join(e.tags) if e.tags else f"{e.id} has no tags")


@app.command("note")
def note(
    experiment_id: IdArg,
    text: Annotated[str | None, typer.Argument(metavar="TEXT", help="the notes ('-': read stdin)")] = None,
    append: Annotated[bool, typer.Option("--append", "-a", help="add a line instead of replacing")] = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Set (or --append to) the notes of an experiment; without TEXT, print them."""
    import sys

    store = open_target(server, local)
    e = store.get_experiment(experiment_id)
    if text is None:
        typer.echo(e.notes or f"{e.id} has no notes")
        return
    if text == "-":
        text = sys.stdin.read()
    if append and e.notes:
        text = e.notes.rstrip("\n") + "\n" + text
    store.annotate(e.id, notes=text)


@app.command("reports")
def reports(
    experiment_id: IdArg,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """The text messages an experiment's scripts reported (logger.report_text), oldest first."""
    store = open_target(server, local)
    e = store.get_experiment(experiment_id)
    texts = store.texts(e.id)
    if output is Format.JSON:
        emit_json(texts)
        return
    if not texts:
        typer.echo(f"{e.id} reported no text (a script reports it with logger.report_text(text))")
        return
    for t in texts:
        where = t["replica"] + (f" rank {t['rank']}" if t["rank"] is not None else "")
        step = f" step {t['step']}" if t["step"] is not None else ""
        typer.echo(f"[{t['title'] or 'text'}{step}, {where}]\n{t['text']}\n")
