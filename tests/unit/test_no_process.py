"""The guard in tests/unit/conftest.py is live: each way of starting a process fails a unit test."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest


def test_subprocess_is_refused_with_where_the_test_belongs() -> None:
    with pytest.raises(AssertionError, match="tests/integration"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


def test_fork_spawn_and_system_are_refused() -> None:
    with pytest.raises(AssertionError):
        os.fork()
    with pytest.raises(AssertionError):
        os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], os.environ)
    with pytest.raises(AssertionError):
        os.system("true")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_is_refused(method: str) -> None:
    process = multiprocessing.get_context(method).Process(target=print)
    with pytest.raises(AssertionError):
        process.start()
