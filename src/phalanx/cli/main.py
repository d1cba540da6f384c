"""Entry point of the `phalanx` command: registers the command modules and maps errors to exits."""

from __future__ import annotations

import importlib
import sys

# One module per command group; each registers its commands on phalanx.cli.app.app when imported.
COMMAND_MODULES = (
    "phalanx.cli.check",
    "phalanx.cli.run",
    "phalanx.cli.tracking",
    "phalanx.cli.models",
    "phalanx.cli.server",
    "phalanx.cli.cluster",
    "phalanx.cli.plot",
)


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command group not built yet
            if exc.name != name:
                raise


def main(argv: list[str] | None = None) -> None:
    from phalanx.cli.app import app
    from phalanx.errors import PhalanxError, exit_status

    _register()
    try:
        # standalone mode: typer answers usage mistakes itself (message + exit 2)
        app(args=argv, prog_name="phalanx")
    except PhalanxError as exc:
        text = str(exc)
        sys.stderr.write(f"{text}\n" if "\n" in text else f"error: {text}\n")
        sys.exit(exit_status(exc))


if __name__ == "__main__":
    main()
