"""`phalanx delete ID [ID...]`: delete experiments with everything they reported, on this machine
or, after `phalanx login` (or with --server), on the server (``DELETE /experiments/{id}``: its
project's admins).

All or nothing: every id is resolved and checked (known, not ambiguous, long enough for a
destructive call, not running) before anything is deleted, so a typo in the third id does not leave
the first two deleted and the user unsure which.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import OutputOpt, YesOpt, app, confirm
from phalanx.cli.listing import emit_json
from phalanx.cli.target import LocalOpt, ServerOpt
from phalanx.cli.tracking import Format, open_target

if TYPE_CHECKING:
    from phalanx.domain import Experiment

# what the store refuses to delete (it would pull an experiment from under its supervisor)
_LIVE = frozenset({"running", "starting", "queued", "pending"})


@app.command("delete")
def delete(
    experiment_ids: Annotated[
        list[str],
        typer.Argument(
            metavar="ID...",
            help="Experiment ids: full, or at least 8 characters of one (a destructive call).",
        ),
    ],
    yes: YesOpt = False,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Delete experiments: their rows, artifacts, spools and run folders. Not while they run."""
    import shutil

    from phalanx.config import Settings
    from phalanx.domain import plural
    from phalanx.errors import Conflict
    from phalanx.ids import check_destructive

    store = open_target(server, local)
    found: list[Experiment] = []
    for given in experiment_ids:
        e = store.get_experiment(given)
        check_destructive(given, e.id)
        if e.status in _LIVE:
            raise Conflict(
                f"experiment {e.id} is {e.status}; stop it before deleting it (nothing was deleted)"
            )
        if all(e.id != seen.id for seen in found):
            found.append(e)
    if not yes:
        listed = "\n".join(f"  {e.id} ({e.project}/{e.name}, {e.status})" for e in found)
        question = f"Delete {plural(len(found), 'experiment')}?\n{listed}\n"
        confirm(question, f"deleting {', '.join(e.id for e in found)}", "nothing deleted")
    here = None if store.server_url else Settings()  # a server's gc sweeps its own folders
    for e in found:
        store.delete_experiment(e.id)
        for folder in (here.spool_dir / e.id, here.runs_dir / e.id) if here else ():
            shutil.rmtree(folder, ignore_errors=True)
    if output is Format.JSON:
        emit_json({"deleted": [e.id for e in found]})
    else:
        for e in found:
            typer.echo(f"deleted {e.id}")
