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


# Commands that end by leaving the interpreter at once: `phalanx run` has imported SQLAlchemy, pydantic
# and typer, whose teardown (module finalisation, SQLite's WAL checkpoint) took 0.3-0.5 s after the
# experiment had ended (bench/README.md). Its outcome is committed and its threads joined by then.
FAST_EXIT_COMMANDS = frozenset({"run"})


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
    except SystemExit as exc:
        args = sys.argv[1:] if argv is None else argv
        if args[:1] and args[0] in FAST_EXIT_COMMANDS and (exc.code is None or isinstance(exc.code, int)):
            _fast_exit(exc.code or 0)
        raise


def _fast_exit(code: int) -> None:
    """Exit without the interpreter's teardown (only from the console entry point, never in-process)."""
    import logging
    import os

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
