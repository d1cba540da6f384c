"""`phalanx server`'s options for services (docs/services.md): idle time, limit, notebooks and
the origin they are served at."""

from __future__ import annotations

from typing import Annotated

import typer

ServiceIdleOpt = Annotated[
    float,
    typer.Option(
        "--service-idle-minutes",
        min=0.01,
        metavar="MINUTES",
        help="a service (TensorBoard) nobody reached for this long is stopped (docs/services.md)",
    ),
]

ServiceLimitOpt = Annotated[
    int,
    typer.Option(
        "--service-limit",
        min=1,
        max=1000,
        metavar="N",
        help="the most service processes (TensorBoards, notebooks, served models' replicas) one project "
        "may run at once",
    ),
]

NotebooksOpt = Annotated[
    bool,
    typer.Option(
        "--notebooks",
        help="let projects' editors start notebook servers; without --service-origin their pages run on "
        "this server's origin, so a notebook's author can act with the session of whoever opens it "
        "(docs/services.md)",
    ),
]

ServiceOriginOpt = Annotated[
    str | None,
    typer.Option(
        "--service-origin",
        metavar="URL",
        help="serve each service at an origin of its own, e.g. 'https://{id}.svc.example.com' (a wildcard "
        "name for this server; no port: the one it is reached on): a notebook's pages then hold nothing "
        "of the server's session (docs/services.md#an-origin-per-service)",
    ),
]
