"""The registry's parity check (phalanx.registry.parity) in a short-lived process of its own: what a
server runs whenever somebody registers a model through it (``ProcessChecker``, the server's
``ModelChecker``: phalanx.registry.checker).

The ONNX file was written by an editor's job, or uploaded through the ingest API: it is untrusted
input to onnxruntime, a large native library, and a crafted file can crash the process that parses
it or run without end. So the server never parses it itself:

- on a server that boxes the project (``check_boxed``), the check runs as
  ``python -m phalanx.registry.parity_child`` in the project's box (phalanx.machine.box): the
  project's account, its own mount and PID namespaces and no network, an allow-listed environment,
  nothing of the server's home, store or keys; it sees only the machine's libraries, Python and
  Phalanx's code, read-only;
- on a server that does not box (not root, or ``--trust-submitters``: ``check_plain``), the same
  child runs as the server's account, in a session of its own, with an environment built from
  nothing but an allow-list (no token, no cloud keys, no PHALANX_* of the server's) and a fresh
  private folder for its home and temporary files. It could read what the server's account reads
  (the box's job, which such a server cannot do), but a crash or a hang is its own, not the server's.

Either way the model and its metadata go in on standard input; the child is held to a deadline
(killed with its process group then, or as soon as its ``stop`` is set: its registration's client
went away), an address-space cap and a bounded answer, and ends with the server however the server
ends (setpriv's --pdeathsig): a crash, a hang or garbage becomes a ParityFailed that says what
happened, never a traceback of the server or a request that never ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from phalanx.backends.local.boxes import PACKAGE_ROOT
from phalanx.errors import UsageError
from phalanx.machine import box
from phalanx.machine.box import Isolation
from phalanx.machine.proctree import MIB
from phalanx.registry.checker import Checked, CheckStopped
from phalanx.registry.parity import Parity, ParityFailed

CHILD = "phalanx.registry.parity_child"
CHECK_SECONDS = 300.0  # loading a large model and running it once on one small batch
ANSWER_MOST = MIB  # its JSON answer: a parity figure and a signature
ERRORS_KEPT = 16 * 1024  # the end of its standard error, for the refusal's reason
BASE_MEMORY = 2048 * MIB  # Python, numpy and onnxruntime with one thread (about 250 MiB), with room
MALLOC = {"MALLOC_ARENA_MAX": "2"}  # glibc's arenas reserve 64 MiB of address space a thread
STOP_POLL = 0.25  # how often a running check looks at its ``stop`` (its wait polls the child anyway)


@dataclass(frozen=True)
class Ran:
    """A finished (or killed) check process: its status, the start of its output, the end of its
    errors; ``timed_out``: killed at the deadline; ``overflow``: it wrote more than was kept;
    ``stopped``: killed (or never started) because its ``stop`` was set."""

    status: int
    out: bytes
    errors: bytes
    timed_out: bool
    overflow: bool
    stopped: bool = False


@dataclass(frozen=True)
class ProcessChecker:
    """A server's ModelChecker: each check in a process of its own, in the project's box when
    ``isolation_for(project)`` names one (the server boxes it), else a plain child process."""

    isolation_for: Callable[[str], Isolation | None]
    seconds: float = CHECK_SECONDS

    def __call__(
        self,
        data: bytes,
        metadata: dict[str, Any],
        project: str,
        where: str,
        stop: threading.Event | None = None,
    ) -> Checked:
        isolation = self.isolation_for(project)
        if isolation is not None:
            return check_boxed(data, metadata, isolation, where, seconds=self.seconds, stop=stop)
        return check_plain(data, metadata, where, seconds=self.seconds, stop=stop)


def memory_for(onnx_bytes: bytes, metadata: dict[str, Any]) -> int:
    """The check's address-space cap: room for Phalanx's Python, and for the file and its metadata
    (the example input and output, as JSON) a few times over (read from standard input, written to
    its private folder, parsed and laid out by onnxruntime or numpy)."""
    return BASE_MEMORY + 4 * (len(onnx_bytes) + len(json.dumps(metadata)))


def check_boxed(
    onnx_bytes: bytes,
    metadata: dict[str, Any],
    isolation: Isolation,
    where: str,
    *,
    seconds: float = CHECK_SECONDS,
    memory: int | None = None,
    stop: threading.Event | None = None,
) -> Checked:
    """Re-check ``onnx_bytes`` (the model ``where`` names) in ``isolation``'s box; ``stop``, once
    set, kills the check.

    Raises:
        UsageError: the model keeps no example input, or names external data (as ``recheck``).
        ParityFailed: the check's process crashed, ran past ``seconds`` or gave no readable answer.
        CheckStopped: ``stop`` was set before the check answered.
    """
    cap = memory_for(onnx_bytes, metadata) if memory is None else memory
    env = {**box.box_env(isolation, "/tmp"), **box.inherited(), "PYTHONPATH": PACKAGE_ROOT, **MALLOC}
    # its /tmp (where onnxruntime loads the file from): a fresh folder of the account's, removed after
    with tempfile.TemporaryDirectory(prefix="phalanx-parity-") as folder:
        box.make_own_folder(Path(folder), isolation)
        ro = (PACKAGE_ROOT, *box.interpreter_trees())
        layout = box.Layout(cwd="/tmp", tmp=folder, ro=ro, network=False)
        # ended with the server however it ends (bubblewrap's --die-with-parent then ends the box);
        # -P: nothing of its working folder is imported; PYTHONPATH: this very Phalanx
        ends = [shutil.which(box.SETPRIV) or box.SETPRIV, "--pdeathsig", "SIGKILL", "--"]
        argv = [*ends, *box.box_argv(isolation, layout), sys.executable, "-P", "-m", CHILD, str(cap)]
        feed = (json.dumps(metadata).encode() + b"\n", onnx_bytes)
        ran = run_bounded(argv, env, feed, seconds, stop=stop)
    return read_answer(ran, where, seconds)


def check_plain(
    onnx_bytes: bytes,
    metadata: dict[str, Any],
    where: str,
    *,
    seconds: float = CHECK_SECONDS,
    memory: int | None = None,
    stop: threading.Event | None = None,
) -> Checked:
    """Re-check ``onnx_bytes`` (the model ``where`` names) in a plain child process of the server's
    account (a server that does not box): what ``check_boxed`` raises, for the same reasons."""
    cap = memory_for(onnx_bytes, metadata) if memory is None else memory
    # its home, working folder and temporary files (where onnxruntime loads the file from): a fresh
    # private folder, removed after
    with tempfile.TemporaryDirectory(prefix="phalanx-parity-") as folder:
        # built from nothing: none of the server's environment (its token, cloud keys, PHALANX_*)
        env = {
            "PATH": box.BOX_PATH,
            "HOME": folder,
            "TMPDIR": folder,
            **box.inherited(),
            "PYTHONPATH": PACKAGE_ROOT,
            **MALLOC,
        }
        # -s -P (with -E, what -I is): no user site packages, nothing of its working folder; not -E,
        # which would drop the PYTHONPATH that names this very Phalanx (the environment has nothing
        # else for -E to drop)
        argv = [sys.executable, "-s", "-P", "-m", CHILD, str(cap)]
        argv = box.ended_with_parent(argv)  # ended with the server however it ends
        feed = (json.dumps(metadata).encode() + b"\n", onnx_bytes)
        ran = run_bounded(argv, env, feed, seconds, cwd=folder, stop=stop)
    return read_answer(ran, where, seconds)


def run_bounded(
    argv: list[str],
    env: dict[str, str],
    feed: tuple[bytes, ...],
    seconds: float,
    cwd: str = "/",
    stop: threading.Event | None = None,
) -> Ran:
    """``argv`` fed ``feed`` on its standard input, in a session of its own, killed with its
    process group at ``seconds``, within STOP_POLL of ``stop`` being set (another thread's way to
    end it: the thread that waits here cannot be cancelled) or when this call ends otherwise: the
    first ANSWER_MOST bytes of its output and the last ERRORS_KEPT of its errors are kept, the rest
    read and dropped (a child that writes without end neither blocks nor fills the server's memory)."""
    if stop is not None and stop.is_set():
        return Ran(-signal.SIGKILL, b"", b"", timed_out=False, overflow=False, stopped=True)
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out: list[bytes] = []
    errors: list[bytes] = []
    overflow = threading.Event()
    threads = [
        threading.Thread(target=_feed, args=(proc.stdin, feed), daemon=True),
        threading.Thread(target=_keep, args=(proc.stdout, out, False, overflow), daemon=True),
        threading.Thread(target=_keep, args=(proc.stderr, errors, True, overflow), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        timed_out, stopped = _wait(proc, time.monotonic() + seconds, stop)
    finally:
        if proc.poll() is None:  # past its deadline, stopped, or this call is ending otherwise
            _kill_group(proc)
    for thread in threads:
        thread.join(timeout=10)  # (nothing of its group outlives it to hold a pipe open)
    return Ran(proc.returncode, b"".join(out), b"".join(errors), timed_out, overflow.is_set(), stopped)


def _wait(proc: subprocess.Popen[bytes], deadline: float, stop: threading.Event | None) -> tuple[bool, bool]:
    """Wait for ``proc`` to end, until ``deadline`` (time.monotonic) or ``stop`` is set: (timed out,
    stopped), both False when it ended."""
    while True:
        left = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, left) if stop is None else min(STOP_POLL, max(0.0, left)))
            return False, False
        except subprocess.TimeoutExpired:
            if stop is not None and stop.is_set():
                return False, True
            if time.monotonic() >= deadline:
                return True, False


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End ``proc`` and its process group (a boxed one: bubblewrap's --die-with-parent ends the box
    with it), and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()
    proc.wait()


def _feed(pipe: IO[bytes], parts: tuple[bytes, ...]) -> None:
    with contextlib.suppress(OSError):  # it ended without reading all: its status says why
        for part in parts:
            pipe.write(part)
    with contextlib.suppress(OSError):
        pipe.close()


def _keep(pipe: IO[bytes], kept: list[bytes], tail: bool, overflow: threading.Event) -> None:
    """Read ``pipe`` to its end, keeping the first ANSWER_MOST bytes (``tail``: the last
    ERRORS_KEPT); ``overflow`` is set when output beyond ANSWER_MOST was dropped."""
    held = b""
    while chunk := os.read(pipe.fileno(), 64 * 1024):
        if tail:
            held = (held + chunk)[-ERRORS_KEPT:]
            continue
        room = ANSWER_MOST - len(held)
        if len(chunk) > room:
            overflow.set()
        held += chunk[:room]
    kept.append(held)


def read_answer(ran: Ran, where: str, seconds: float) -> Checked:
    """The check's result from its process's end (see ``check_boxed`` for what is raised)."""
    if ran.stopped:
        raise CheckStopped(where)
    if ran.timed_out:
        raise ParityFailed(
            f"{where}: the parity check did not finish within {seconds:g} s (onnxruntime ran the file "
            "on its example input for longer than a check may take); refusing to register it"
        )
    if ran.status != 0:
        said = ran.errors.decode(errors="replace").strip().splitlines()
        raise ParityFailed(
            f"{where}: the parity check's process ended without an answer ({_ended(ran.status)}"
            f"{': ' + said[-1][:300] if said else ''}); the ONNX file crashed onnxruntime or exhausted "
            "what a check may use; refusing to register it"
        )
    try:
        if ran.overflow:
            raise ValueError(f"more than {ANSWER_MOST:,} bytes")
        doc = json.loads(ran.out)
        if isinstance(doc, dict) and isinstance(doc.get("refused"), str):
            raise UsageError(doc["refused"])
        if not isinstance(doc, dict) or not isinstance(doc.get("signature"), dict | None):
            raise ValueError("not an answer")
        return Checked(Parity.from_dict(doc.get("parity")), doc["signature"])
    except (ValueError, KeyError) as exc:  # (json's own errors are ValueErrors)
        raise ParityFailed(
            f"{where}: the parity check's answer could not be read ({exc}): "
            f"{ran.out[:200].decode(errors='replace')!r}; refusing to register it"
        ) from None


def _ended(status: int) -> str:
    """How a process ended, from its status (bubblewrap reports a signal as 128 + its number)."""
    number = -status if status < 0 else status - 128 if status > 128 else 0
    try:
        return f"killed by {signal.Signals(number).name}" if number else f"exit status {status}"
    except ValueError:
        return f"exit status {status}"
