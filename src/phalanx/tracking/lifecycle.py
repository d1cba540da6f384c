"""What happens around a task's process: argparse arguments recorded as they are parsed, a main
script's status decided at exit (succeeded / failed on an uncaught exception / stopped on SIGINT or
SIGTERM), and everything buffered flushed at close(), at exit, at a multiprocessing child's end and
on SIGTERM (any handler that was there before is still called). Standard library only."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from phalanx.tracking.client import jsonable

# --- argparse --------------------------------------------------------------------------------------

_pending_args: dict[str, Any] = {}
_args_listeners: list[Callable[[dict[str, Any]], None]] = []
_original_parse_known_args = argparse.ArgumentParser.parse_known_args


def _patched_parse_known_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
    result = _original_parse_known_args(self, *args, **kwargs)
    with contextlib.suppress(Exception):  # recording must never break a program's argument parsing
        namespace = result[0]
        values = {k: jsonable(v) for k, v in vars(namespace).items() if not k.startswith("_")}
        _pending_args.update(values)
        for listener in list(_args_listeners):
            listener(values)
    return result


def patch_argparse() -> None:
    """Record every parsed namespace (also one parsed before Task.init: ClearML's behaviour)."""
    if argparse.ArgumentParser.parse_known_args is not _patched_parse_known_args:
        argparse.ArgumentParser.parse_known_args = _patched_parse_known_args  # type: ignore[method-assign]


def parsed_args() -> dict[str, Any]:
    """What argparse parsed since the SDK was imported; if nothing (``parse_args()`` ran before
    ``from phalanx import Task``), the Namespace held by a variable of a calling function or of the
    main module, so those arguments are recorded too."""
    if _pending_args:
        return dict(_pending_args)
    with contextlib.suppress(Exception):
        namespace = _namespace_in_callers()
        if namespace is not None:
            return {k: jsonable(v) for k, v in vars(namespace).items() if not k.startswith("_")}
    return {}


def _namespace_in_callers() -> argparse.Namespace | None:
    frame = sys._getframe(1)
    scopes: list[dict[str, Any]] = []
    while frame is not None:
        if not frame.f_globals.get("__name__", "").startswith("phalanx.tracking"):
            scopes.append(frame.f_locals)
        frame = frame.f_back  # type: ignore[assignment]
    main = sys.modules.get("__main__")
    if main is not None:
        scopes.append(vars(main))
    for scope in scopes:
        for value in list(scope.values()):
            if isinstance(value, argparse.Namespace):
                return value
    return None


def on_args(listener: Callable[[dict[str, Any]], None]) -> None:
    _args_listeners.append(listener)


# --- exit ------------------------------------------------------------------------------------------


class Lifecycle:
    """Hooks for one process. ``finalize`` runs once per process (fork children get their own)."""

    def __init__(
        self,
        finalize: Callable[[str, str | None], None],
        stop_after_drain: Callable[[Callable[[], None]], bool],
    ) -> None:
        self._finalize = finalize
        self._stop_after_drain = stop_after_drain  # see Reporter.stop_after_drain
        self.outcome: tuple[str, str | None] = ("succeeded", None)
        self._done_pid: int | None = None
        self._lock = threading.RLock()
        self._prev_excepthook = sys.excepthook
        self._prev_sigterm: Any = None

    def install(self) -> None:
        atexit.register(self.finalize)
        sys.excepthook = self._excepthook
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError):
                self._prev_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        self.register_multiprocessing()

    def register_multiprocessing(self) -> None:
        """multiprocessing children leave through os._exit (no atexit) but run its finalizers."""
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            util.Finalize(None, self.finalize, exitpriority=100)

    def after_fork(self) -> None:
        """In a forked child. A multiprocessing child clears its finalizers after the fork, then
        runs its after-fork callbacks: register there so the finalizer survives the clearing."""
        self._done_pid = None
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            util.register_after_fork(self, Lifecycle.register_multiprocessing)
        self.register_multiprocessing()

    def finalize(self) -> None:
        with self._lock:
            if self._done_pid == os.getpid():
                return
            self._done_pid = os.getpid()
            status, reason = self.outcome
            self._finalize(status, reason)

    def _excepthook(self, kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            self.outcome = ("stopped", "interrupted (SIGINT)")
        else:
            self.outcome = ("failed", f"{kind.__name__}: {value}")
        self._prev_excepthook(kind, value, tb)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.outcome = ("stopped", "terminated (SIGTERM)")
        # in the middle of a drain, a flush from here would lose what that drain took: it ends first
        # and then stops the process as below (the same final flush, status and exit)
        if not self._stop_after_drain(lambda: self._stop(signum, frame)):
            self._stop(signum, frame)

    def _stop(self, signum: int, frame: Any) -> None:
        self.finalize()
        prev = self._prev_sigterm
        if callable(prev):
            prev(signum, frame)
        elif prev != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
