"""Which process states a flush reads as "its ingester will not answer" (machine.procs)."""

from __future__ import annotations

import os

from phalanx.machine.procs import pid_stopped, signal_stopped


def test_a_signal_stop_is_stopped_and_a_profilers_tracing_stop_is_not() -> None:
    assert signal_stopped("4242 (phalanx run) T 1 4242 4242 0 -1")  # Ctrl-Z, SIGSTOP
    assert not signal_stopped("4242 (python) t 1 4242 4242 0 -1")  # py-spy's sample, a debugger
    assert not signal_stopped("4242 (python) S 1 4242 4242 0 -1")
    assert not signal_stopped("4242 (a) T) S 1 4242")  # the name may hold ") T"
    assert not signal_stopped("")


def test_this_running_process_is_not_stopped() -> None:
    assert not pid_stopped(os.getpid())
