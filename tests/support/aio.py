"""Run a coroutine to its end from a test, with a time limit: in a thread of its own, so that a
scenario that never ends fails its test instead of hanging it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run_in_own_loop(scenario: Callable[[], Coroutine[Any, Any, T]], timeout: float = 60) -> T:
    """``asyncio.run(scenario())`` in a fresh thread; its result or its exception comes back here.
    A scenario still running after ``timeout`` fails the test (TimeoutError) instead of hanging it."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(lambda: asyncio.run(scenario())).result(timeout)
    finally:
        pool.shutdown(wait=False)
