"""Dynamic batching: concurrent requests joined into one ONNX Runtime call.

The first waiting request opens a batch; it closes when it holds ``max_batch`` rows or ``max_wait``
seconds have passed, whichever is first; requests that came while every worker was busy join the
next batch at once. At most ``workers`` batches run at once (ONNX Runtime releases the GIL, so
they run in parallel threads). A batch takes the served model once (see
follower.py), so all its requests are answered by the same version. A request larger than
``max_batch`` rows runs alone, never split. With batching off each request is its own batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from phalanx.serving.follower import Loaded


@dataclass
class _Pending:
    inputs: dict[str, np.ndarray]
    rows: int
    future: asyncio.Future[tuple[Loaded, list[np.ndarray]]]
    queued: float = field(default_factory=time.perf_counter)


def run(loaded: Loaded, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    outputs: list[np.ndarray] = loaded.session.run(None, inputs)
    return outputs


class Batcher:
    def __init__(
        self,
        current: Callable[[], Loaded],
        *,
        enabled: bool = True,
        max_batch: int = 64,
        max_wait: float = 0.002,
        workers: int = 1,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._current = current
        self.enabled = enabled
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.workers = workers
        self._on_batch = on_batch
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="phalanx-serve")
        self._queue: asyncio.Queue[_Pending] | None = None
        self._slots: asyncio.Semaphore | None = None
        self._collector: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()  # batches in flight (a task needs a reference)

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._slots = asyncio.Semaphore(self.workers)
        if self.enabled:
            self._collector = asyncio.create_task(self._collect())

    async def stop(self) -> None:
        if self._collector is not None:
            self._collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._collector
        self._pool.shutdown(wait=True)

    async def predict(self, inputs: dict[str, np.ndarray]) -> tuple[Loaded, list[np.ndarray]]:
        """The outputs for one request and the version that computed them."""
        assert self._queue is not None and self._slots is not None, "start() first"
        rows = next(iter(inputs.values())).shape[0]
        if not self.enabled or rows >= self.max_batch:
            async with self._slots:
                loaded = self._current()
                if self._on_batch:
                    self._on_batch(rows)
                outputs = await asyncio.get_running_loop().run_in_executor(self._pool, run, loaded, inputs)
            return loaded, outputs
        future: asyncio.Future[tuple[Loaded, list[np.ndarray]]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(inputs, rows, future))
        return await future

    async def _collect(self) -> None:
        """Form batches: take the first waiting request, wait for a free worker (requests that come
        meanwhile join), take whatever else is waiting, then wait up to ``max_wait`` for more while
        the batch has room. With ``max_wait`` 0 a batch is what queued while the workers were busy:
        no added latency at low load, large batches under load."""
        assert self._queue is not None and self._slots is not None
        loop = asyncio.get_running_loop()
        carry: _Pending | None = None
        while True:
            first = carry if carry is not None else await self._queue.get()
            carry = None
            await self._slots.acquire()
            batch, rows = [first], first.rows
            deadline = loop.time() + self.max_wait
            while rows < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        item = await asyncio.wait_for(self._queue.get(), remaining)
                    except TimeoutError:
                        break
                if rows + item.rows > self.max_batch:
                    carry = item  # opens the next batch
                    break
                batch.append(item)
                rows += item.rows
            task = asyncio.create_task(self._run_batch(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run_batch(self, batch: list[_Pending]) -> None:
        assert self._slots is not None
        try:
            loaded = self._current()
            names = list(batch[0].inputs)
            joined = {
                n: np.concatenate([p.inputs[n] for p in batch]) if len(batch) > 1 else batch[0].inputs[n]
                for n in names
            }
            if self._on_batch:
                self._on_batch(sum(p.rows for p in batch))
            outputs: list[Any] = await asyncio.get_running_loop().run_in_executor(
                self._pool, run, loaded, joined
            )
            start = 0
            for p in batch:
                part = [o[start : start + p.rows] for o in outputs]
                start += p.rows
                if not p.future.done():
                    p.future.set_result((loaded, part))
        except Exception as exc:  # one failing batch fails its own requests, not the server
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(exc)
        finally:
            self._slots.release()
