"""`phalanx sync`: send what this machine's spool still holds to where it belongs.

With PHALANX_HOST set, spool files left by processes that exited while the server could not be
reached are shipped to it (from where they stopped; the server stores each record once). Without
it, one ingest pass into the local store. Either way, experiments whose supervisor or script was
killed are then given a final status. Reporting processes do the shipping part by themselves when
they start; this command is for a machine where nothing else will run.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from phalanx.cli.app import app
from phalanx.cli.target import ThisMachineOnlyOpt, this_machine_only


@app.command("sync")
def sync(
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, metavar="SECONDS", help="Give up (for now) after this long.")
    ] = 300.0,
    server: ThisMachineOnlyOpt = None,
) -> None:
    """Ship (or ingest) what this machine's spool holds for experiments whose processes have exited."""
    from phalanx.config import Settings

    this_machine_only(
        "sync",
        server,
        "it ships this machine's spool to PHALANX_HOST (or ingests it here); the server ingests its own",
    )

    settings = Settings()
    if settings.host:
        from phalanx.tracking.shipper import ship_leftovers

        shipped, finished, problems = ship_leftovers(
            settings.spool_dir, settings.host, settings.token, timeout=timeout
        )
        typer.echo(f"shipped {shipped} records to {settings.host} ({finished} spool files done)")
        for problem in problems:
            sys.stderr.write(f"phalanx sync: {problem}\n")
        if problems:
            raise typer.Exit(1)
        return
    from phalanx.cli.tracking import open_for_reading

    open_for_reading(settings)
    typer.echo(f"ingested the spool into {settings.database_url}")
