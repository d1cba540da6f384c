"""Dynamic batching: concurrent requests joined into one ONNX Runtime call.

A request that finds a worker free and nobody waiting runs at once, alone (a batch waits only for
a reason: a worker busy, or, with ``max_wait``, other requests still being read). Otherwise it
queues: the first waiting request opens a batch; it closes when it holds ``max_batch`` rows or
``max_wait`` seconds have passed while other requests were still arriving, whichever is first;
requests that came while every worker was busy join the next batch at once. At most ``workers``
batches run at once (ONNX Runtime releases the GIL, so they run in parallel threads). A batch takes
the served model once (see follower.py), so all its requests are answered by the same version. A
request larger than ``max_batch`` rows runs alone, never split. With batching off each request is
its own batch.

Where a call runs: a model whose calls take under ``inline_below`` (measured, per version) runs on
the event loop itself. Handing a call of a few microseconds to a thread cost more than the call (a
thread hop, and the GIL handed back and forth while the loop parses requests: bench/serve.py
measured batching at half the unbatched throughput for the digits MLP), and blocking the loop for
that long costs nothing. A longer call runs in the pool, so the loop keeps reading requests, which
queue and form the next batch: batching then pays by itself.
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


INLINE_BELOW = 0.0005  # seconds: a call this short runs on the event loop (see the module's doc)


def _timed(loaded: Loaded, inputs: dict[str, np.ndarray]) -> tuple[list[np.ndarray], float]:
    started = time.perf_counter()
    outputs = run(loaded, inputs)
    return outputs, time.perf_counter() - started


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
        inline_below: float = INLINE_BELOW,
    ) -> None:
        self._current = current
        self.enabled = enabled
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.workers = workers
        self.inline_below = inline_below
        self._on_batch = on_batch
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="phalanx-serve")
        self._queue: asyncio.Queue[_Pending] | None = None
        self._slots: asyncio.Semaphore | None = None
        self._collector: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()  # batches in flight (a task needs a reference)
        self._forming = False  # the collector holds a request it has not dispatched yet
        self.arriving = 0  # requests the endpoint is still reading or decoding (app.py counts them)
        self.inline = False  # calls of the served version run on the loop (measured short)
        self._measured: tuple[int, float] | None = None  # (version, the slowest recent call)

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
        if not self.enabled or rows >= self.max_batch or self._alone():
            async with self._slots:
                loaded = self._current()
                if self._on_batch:
                    self._on_batch(rows)
                outputs = await self._call(loaded, inputs)
            return loaded, outputs
        future: asyncio.Future[tuple[Loaded, list[np.ndarray]]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(inputs, rows, future))
        return await future

    def _alone(self) -> bool:
        """Nothing to wait for: a worker is free, nobody queued, and no other request is on its
        way that ``max_wait`` would wait for."""
        assert self._queue is not None and self._slots is not None
        if self._forming or not self._queue.empty() or self._slots.locked():
            return False
        return self.max_wait <= 0 or self.arriving == 0

    async def _call(self, loaded: Loaded, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One ONNX Runtime call: on the loop when this version's calls are short, else in the pool."""
        if self.inline and self._measured is not None and self._measured[0] == loaded.version:
            outputs, took = _timed(loaded, inputs)
        else:
            outputs, took = await asyncio.get_running_loop().run_in_executor(
                self._pool, _timed, loaded, inputs
            )
        self._learn(loaded.version, took)
        return outputs

    def _learn(self, version: int, took: float) -> None:
        """Inline from the second short call of a version on; one long call sends it to the pool."""
        if self._measured is None or self._measured[0] != version:
            self._measured = (version, took)
        else:
            self._measured = (version, max(took, 0.5 * self._measured[1] + 0.5 * took))
        self.inline = took < self.inline_below and self._measured[1] < self.inline_below

    async def _collect(self) -> None:
        """Form batches: take the first waiting request, wait for a free worker (requests that come
        meanwhile join), take whatever else is waiting, then, while the batch has room and other
        requests are still being read, wait up to ``max_wait`` for them. With ``max_wait`` 0 a
        batch is what queued while the workers were busy: no added latency."""
        assert self._queue is not None and self._slots is not None
        loop = asyncio.get_running_loop()
        carry: _Pending | None = None
        while True:
            first = carry if carry is not None else await self._queue.get()
            carry = None
            self._forming = True
            await self._slots.acquire()
            batch, rows = [first], first.rows
            deadline = loop.time() + self.max_wait
            while rows < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if remaining <= 0 or self.arriving == 0:
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
            self._forming = carry is not None
            if self.inline:
                await self._run_batch(batch)  # a short call: no task, no thread
                continue
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
            outputs: list[Any] = await self._call(loaded, joined)
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
