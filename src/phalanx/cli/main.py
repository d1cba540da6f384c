"""Entry point of the `phalanx` command: registers the command modules and maps errors to exits."""

from __future__ import annotations

import codecs
import contextlib
import errno
import fcntl
import importlib
import io
import os
import select
import sys
from collections.abc import Callable
from typing import NoReturn

# One module per command group; each registers its commands on phalanx.cli.app.app when imported.
COMMAND_MODULES = (
    "phalanx.cli.check",
    "phalanx.cli.run",
    "phalanx.cli.tracking",
    "phalanx.cli.delete",
    "phalanx.cli.models",
    "phalanx.cli.serve",
    "phalanx.cli.server",
    "phalanx.cli.cluster",
    "phalanx.cli.placement",
    "phalanx.cli.plot",
    "phalanx.cli.queue",
    "phalanx.cli.quota",
    "phalanx.cli.secret",
    "phalanx.cli.alert",
    "phalanx.cli.tensorboard",
    "phalanx.cli.notebook",
    "phalanx.cli.group",
    "phalanx.cli.resume",
    "phalanx.cli.annotate",
    "phalanx.cli.sync",
    "phalanx.cli.data",
    "phalanx.cli.login",
    "phalanx.cli.admin",
)


# Which module registers each top-level command: `phalanx ls` imports cli/tracking.py alone, not the
# fifteen modules (and what they import) that `phalanx --help` must list. A unit test checks this table
# against what the modules register (tests/unit/cli/test_lazy_commands.py).
COMMAND_MODULE = {
    "check": "phalanx.cli.check",
    "run": "phalanx.cli.run",
    "logs": "phalanx.cli.run",
    "stop": "phalanx.cli.run",
    "ls": "phalanx.cli.tracking",
    "get": "phalanx.cli.tracking",
    "metrics": "phalanx.cli.tracking",
    "params": "phalanx.cli.tracking",
    "artifacts": "phalanx.cli.tracking",
    "gc": "phalanx.cli.tracking",
    "delete": "phalanx.cli.delete",
    "models": "phalanx.cli.models",
    "serve": "phalanx.cli.serve",
    "server": "phalanx.cli.server",
    "cluster": "phalanx.cli.placement",  # it imports cli/cluster.py and adds `map`/`unmap`/`maps`
    "plot": "phalanx.cli.plot",
    "queue": "phalanx.cli.queue",
    "group": "phalanx.cli.group",
    "checkpoints": "phalanx.cli.resume",
    "resume": "phalanx.cli.resume",
    "rerun": "phalanx.cli.resume",
    "diff": "phalanx.cli.resume",
    "tag": "phalanx.cli.annotate",
    "note": "phalanx.cli.annotate",
    "reports": "phalanx.cli.annotate",
    "sync": "phalanx.cli.sync",
    "datastore": "phalanx.cli.data",
    "data": "phalanx.cli.data",
    "version": "phalanx.cli.app",
    "login": "phalanx.cli.login",
    "logout": "phalanx.cli.login",
    "admin": "phalanx.cli.admin",
    "quota": "phalanx.cli.quota",
    "secret": "phalanx.cli.secret",
    "alert": "phalanx.cli.alert",
    "tensorboard": "phalanx.cli.tensorboard",
    "notebook": "phalanx.cli.notebook",
}


def modules_for(args: list[str]) -> tuple[str, ...]:
    """The command modules `phalanx ARGS` needs: the one that registers its command, or all of them
    when the command is not named (root options, `--help`) or not known (typer's "No such command")."""
    if args and not args[0].startswith("-") and args[0] in COMMAND_MODULE:
        return (COMMAND_MODULE[args[0]],)
    return COMMAND_MODULES


def _register(args: list[str] | None = None) -> None:
    for name in COMMAND_MODULES if args is None else modules_for(args):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command group not built yet
            if exc.name != name:
                raise


# Commands that end by leaving the interpreter at once: `phalanx run` has imported SQLAlchemy (and on
# Typer's door pydantic and typer), whose teardown (module finalisation, SQLite's WAL checkpoint) took
# 0.3-0.5 s after the experiment had ended (bench/README.md). Its outcome is committed and its threads
# joined by then; it ends with a SystemExit of the experiment's status on both doors (cli/foreground.py).
# The lean `run --detach` returns once it printed the id (its supervisor, forked, lives on): the
# teardown of the ~300 modules it imported would be 0.01-0.02 CPU-s of the whole submission.
FAST_EXIT_COMMANDS = frozenset({"run"})


# Commands whose file is given with -f: a file named without it is the commonest slip.
FILE_COMMANDS = (("run",), ("check",), ("group", "run"))


def _file_without_f(args: list[str]) -> str | None:
    """`phalanx run train.yml` (no -f): typer said only "Missing option '-f'", not that the file
    was there. The message that names the command to type instead, or None."""
    if any(a in ("-f", "--file", "--help") or a.startswith(("--file=", "-f")) for a in args):
        return None
    for command in FILE_COMMANDS:
        if tuple(args[: len(command)]) != command:
            continue
        rest = args[len(command) :]
        files = [
            a
            for i, a in enumerate(rest)
            if not a.startswith("-")
            and "=" not in a
            and a.endswith((".yml", ".yaml"))
            and (i == 0 or rest[i - 1] != "--param")
        ]
        if len(files) == 1:
            fixed = [a if a != files[0] else f"-f {files[0]}" for a in rest]
            return f"error: {files[0]}: give the file with -f: `phalanx {' '.join([*command, *fixed])}`\n"
    return None


def _several_files(args: list[str]) -> str | None:
    """`phalanx run -f a.yml -f b.yml`: typer kept the last -f and dropped the others without a word.
    Polyaxon 0.x deep-merged several files; Phalanx refuses instead (docs/experiment-file.md, "One
    file"): a merged file's problems could not be shown at their line in the file they came from."""
    for command in FILE_COMMANDS:
        if tuple(args[: len(command)]) != command:
            continue
        rest, files, i = args[len(command) :], [], 0
        while i < len(rest) and rest[i] != "--":
            a = rest[i]
            if a in ("-f", "--file") and i + 1 < len(rest):
                files.append(rest[i + 1])
                i += 1
            elif a.startswith("--file="):
                files.append(a.split("=", 1)[1])
            elif a.startswith("-f") and not a.startswith("--") and len(a) > 2:
                files.append(a[2:])
            elif a == "--param":
                i += 1  # its value is not an option
            i += 1
        if len(files) > 1:
            return (
                f"error: -f given {len(files)} times ({', '.join(files)}): Phalanx reads one experiment"
                " file. Polyaxon 0.x merged several (later keys overriding earlier ones); Phalanx does not,"
                " so that every problem is shown at its line in its own file. Put the shared keys in one"
                " file (YAML anchors and `<<:` merge keys work inside it) and pass the values that change"
                " with --param NAME=VALUE (docs/experiment-file.md, 'One file, not several')\n"
            )
    return None


def _show_unencodable() -> None:
    """On a stream whose encoding cannot show every character (PYTHONIOENCODING=ascii, a C locale
    with Python's UTF-8 mode off) a name a job reported (a metric's title, a console line) is shown
    escaped (`\xfc`), as Python shows it on stderr, instead of ending the command with a traceback.
    In a C locale Python writes with "surrogateescape", which fails on such a character just the same."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "surrogateescape"):
            with contextlib.suppress(LookupError, ValueError):
                if codecs.lookup(stream.encoding).name != "utf-8":
                    stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    _stand_in_for_closed_streams()
    _show_unencodable()
    slip = _file_without_f(args) or _several_files(args)
    if slip is not None:
        sys.stderr.write(slip)
        sys.exit(2)
    # `phalanx ls` (the plain forms) without typer, pydantic or SQLAlchemy: cli/lean.py says why
    if _answer(lambda: _lean(args), args):
        if args[:1] and args[0] in FAST_EXIT_COMMANDS:  # `run --detach`: its supervisor is forked
            _fast_exit(0)
        return
    try:
        from phalanx.cli.app import app

        _register(args)
    except KeyboardInterrupt:  # Ctrl-C while Python was still importing: nothing was started
        sys.stderr.write("phalanx: interrupted\n")
        sys.exit(130)
    # standalone mode: typer answers usage mistakes itself (message + exit 2)
    _answer(lambda: app(args=argv, prog_name="phalanx"), args)


def _lean(args: list[str]) -> bool:
    from phalanx.cli.lean import dispatch

    return dispatch(args)


def _answer(work: Callable[[], object], args: list[str]) -> bool:
    """Run a command; a Phalanx error, Ctrl-C or a PHALANX_HOME file-system error becomes its
    message and exit status (never a traceback). Returns whether ``work`` said it answered."""
    from phalanx.errors import PhalanxError, SpecError, exit_status

    try:
        answered = bool(work())
        sys.stdout.flush()  # a reader gone shows here, not as "Exception ignored" at exit
        return answered
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # another pipe's (a child's stdin, a socket): a failure of its own, not a cut output
        _output_cut()
    except PhalanxError as exc:
        text = str(exc)
        # a file's problems are one located line each (FILE:LINE:COL: ...); any other message,
        # one line or several (pip's last lines, who holds the cores), starts with `error:`
        located = isinstance(exc, SpecError) and "\n" in text
        sys.stderr.write(f"{text}\n" if located or text.startswith("error:") else f"error: {text}\n")
        sys.exit(exit_status(exc))
    except KeyboardInterrupt:  # Ctrl-C outside the supervisor's own handling: no traceback
        sys.stderr.write("phalanx: interrupted\n")
        sys.exit(130)
    except OSError as exc:
        if exc.errno == errno.EBADF and _stdout_closed():
            _output_refused()
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            sys.stderr.write(f"error: {_open_files_message(exc)}\n")
            sys.exit(1)
        if exc.errno not in HOME_ERRNOS:
            raise
        sys.stderr.write(f"error: {_os_error_message(exc)}\n")
        sys.exit(1 if exc.errno in (errno.ENOSPC, errno.EDQUOT) else 2)
    except SystemExit as exc:
        if _typer_met_a_cut_pipe():
            _output_cut()
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _output_cut()
        except OSError as flushed:
            if flushed.errno == errno.EBADF and _stdout_closed():
                _output_refused()
            raise
        if args[:1] and args[0] in FAST_EXIT_COMMANDS and (exc.code is None or isinstance(exc.code, int)):
            _fast_exit(exc.code or 0)
        raise


# `phalanx ls | head -1`: the reader closed the pipe before the command was done writing. The status
# is the one the shell reports for coreutils cut the same way (`seq 100000 | head -1` under `set -o
# pipefail`: 141, 128 + SIGPIPE), the same for every command and both entry points, so a script can
# tell "output cut" from 1 (failed) and 2 (invalid). SIGPIPE is not left at its default (it would
# kill the process the same way): a foreground `phalanx run` must survive a closed pipe and finish
# recording its replicas (cli/terminal.py's GuardedStream drops its echo instead).
OUTPUT_CUT = 141


def _output_cut() -> NoReturn:
    """End a command whose stdout reader has gone: no traceback, and stdout pointed at /dev/null
    (the Python docs' recipe, signal module, "Note on SIGPIPE") so that the interpreter's flush at
    exit meets no broken pipe ("Exception ignored ... BrokenPipeError")."""
    with contextlib.suppress(OSError, ValueError):
        _stdout_to_devnull(sys.stdout.fileno())
    sys.exit(OUTPUT_CUT)


def _stdout_to_devnull(fd: int) -> None:
    """Point ``fd`` (stdout's) at /dev/null (writable): the interpreter's flush at exit then fails
    no more."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)


# `phalanx ls >&-`: stdout closed before the command started. Python leaves sys.stdout None (a write
# was an AttributeError traceback), and the first file the command opened (the store's database)
# would have taken descriptor 1 and so received what a child process writes to its stdout. Descriptor
# 1 is held by /dev/null opened read-only instead: nothing else can take it, and a write there fails
# with EBADF as on the closed descriptor. The command ends with a short message and status 1, as
# coreutils do (`ls >&-`: "write error: Bad file descriptor"); one that writes nothing is unaffected.
# A closed stdin reads as empty and a closed stderr swallows what is written to it (/dev/null).
STAND_INS = ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_RDONLY), (2, "stderr", os.O_WRONLY))


def _stand_in_for_closed_streams() -> None:
    """Put /dev/null on each standard descriptor that is closed, and a text stream on it where
    Python left none (see STAND_INS)."""
    for fd, name, flags in STAND_INS:
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            held = os.open(os.devnull, flags)
            if held != fd:
                os.dup2(held, fd)
                os.close(held)
            os.set_inheritable(fd, False)  # a child it starts finds it closed, as this command did
        if fd == 0:
            sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(fd, "r", closefd=False)))
            continue
        stream = io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(fd, "w", closefd=False)), errors="backslashreplace"
        )
        if fd == 1:
            sys.stdout = stream
        else:
            sys.stderr = stream


def _stdout_closed() -> bool:
    """Whether descriptor 1 is the read-only stand-in of a closed stdout (see STAND_INS)."""
    try:
        return fcntl.fcntl(1, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    except OSError:
        return False


def _output_refused() -> NoReturn:
    """End a command that wrote to a closed stdout: a line on stderr, status 1, and stdout pointed
    at /dev/null (writable) so that the interpreter's flush at exit fails no more."""
    sys.stderr.write("phalanx: cannot write the output: stdout is closed (Bad file descriptor)\n")
    _stdout_to_devnull(1)
    sys.exit(1)


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (the kernel flags its write end with POLLERR);
    True when it cannot be asked (no descriptor: a stream of the caller's)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLNVAL) for _, events in poller.poll(0))


def _typer_met_a_cut_pipe() -> bool:
    """Typer (like click) answers EPIPE itself: it wraps sys.stdout in click's PacifyFlushWrapper
    and exits 1, silently. Seen here, it becomes the same exit as on the lean path."""
    for module in ("typer._click.utils", "click.utils"):  # typer 0.29 carries its own click
        utils = sys.modules.get(module)
        wrapper = getattr(utils, "_PacifyFlushWrapper", None) or getattr(utils, "PacifyFlushWrapper", None)
        if isinstance(wrapper, type) and isinstance(sys.stdout, wrapper):
            return True
    return False


# Errors of the file system under PHALANX_HOME (a file where a folder should be, no permission, a
# read-only or full disk): a message that names the path and the fix, not a traceback.
HOME_ERRNOS = frozenset(
    {errno.ENOTDIR, errno.EEXIST, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}
)


def _os_error_message(exc: OSError) -> str:
    path = str(exc.filename or "a file")
    what = exc.strerror or str(exc)
    home = os.path.abspath(os.path.expanduser(os.environ.get("PHALANX_HOME") or "~/.phalanx"))
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free some space, or use another disk"
    elif not os.path.abspath(path).startswith(home):
        fix = (
            "a file is where a folder is needed"
            if exc.errno in (errno.ENOTDIR, errno.EEXIST)
            else "check that path"
        )
    elif exc.errno in (errno.ENOTDIR, errno.EEXIST):
        fix = f"PHALANX_HOME ({home}) must be a folder: point it at one"
    else:
        fix = f"PHALANX_HOME ({home}) must be a folder you can write to: fix its permissions or move it"
    return f"cannot use {path}: {what}; {fix}"


def _open_files_message(exc: OSError) -> str:
    """Too many open files, for this process (EMFILE: its `ulimit -n`) or the whole machine."""
    import resource

    if exc.errno == errno.ENFILE:
        return f"the machine has too many files open ({exc.filename or 'a file'}): close some, and run again"
    allowed = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return (
        f"too many open files ({exc.filename or 'a file'}): this shell lets a process open {allowed}"
        f" (`ulimit -n`); raise it, e.g. `ulimit -n {max(4096, 2 * allowed)}`, and run again"
    )


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
