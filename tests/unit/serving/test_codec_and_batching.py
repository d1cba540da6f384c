"""The serving pieces without HTTP: request bodies checked against a signature, and the batcher
joining concurrent requests into calls of at most max_batch rows, each answered by one version."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from phalanx.serving.batching import Batcher
from phalanx.serving.codec import NPY, NPZ, InvalidInput, decode
from phalanx.serving.follower import Loaded
from tests.support.onnx_models import random_linear

SIGNATURE = {
    "inputs": [{"name": "input", "dtype": "float32", "shape": [None, 4]}],
    "outputs": [{"name": "output", "dtype": "float32", "shape": [None, 2]}],
}


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_json_and_npy_bodies_decode_to_the_signature() -> None:
    got = decode(json.dumps({"inputs": [[1, 2, 3, 4]]}).encode(), "application/json", SIGNATURE)
    assert got["input"].dtype == np.float32 and got["input"].shape == (1, 4)
    named = decode(json.dumps({"inputs": {"input": [[0.5] * 4] * 3}}).encode(), "application/json", SIGNATURE)
    assert named["input"].shape == (3, 4)
    arr = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert np.array_equal(decode(_npy(arr), NPY, SIGNATURE)["input"], arr)
    buf = io.BytesIO()
    np.savez(buf, input=arr)
    assert np.array_equal(decode(buf.getvalue(), NPZ, SIGNATURE)["input"], arr)


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (
            _npy(np.zeros((2, 4), np.float64)),
            NPY,
            "input 'input': expected float32[?, 4], got dtype float64[2, 4]",
        ),
        (
            _npy(np.zeros((2, 5), np.float32)),
            NPY,
            "input 'input': expected float32[?, 4], got shape float32[2, 5]",
        ),
        (b'{"inputs": [1, 2, 3, 4]}', "application/json", "expected float32[?, 4], got shape float32[4]"),
        (b'{"inputs": {"x": [[1, 2, 3, 4]]}}', "application/json", "unknown input 'x'"),
        (b'{"inputs": [[1, 2], [3]]}', "application/json", "not a rectangular array"),
        (b'{"rows": []}', "application/json", '{"inputs"'),
        (b"not json", "application/json", "not JSON"),
        (b"garbage", NPY, "not an .npy array"),
    ],
)
def test_bodies_that_do_not_fit_are_refused_naming_what_and_why(
    body: bytes, content_type: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        decode(body, content_type, SIGNATURE)
    assert message in str(caught.value)


def _loaded(version: int) -> Loaded:
    import onnxruntime as ort

    session = ort.InferenceSession(random_linear(version, 4, 2), providers=["CPUExecutionProvider"])
    return Loaded("m", version, session, SIGNATURE, "CPUExecutionProvider")


def test_concurrent_requests_are_joined_and_each_gets_its_own_rows() -> None:
    loaded = _loaded(1)
    sizes: list[int] = []

    async def scenario() -> list[tuple[int, np.ndarray, np.ndarray]]:
        # inline_below=0: every call in the pool, as a model whose calls take long
        batcher = Batcher(lambda: loaded, max_batch=8, max_wait=0.05, on_batch=sizes.append, inline_below=0)
        await batcher.start()
        inputs = [np.full((1 + i % 3, 4), float(i), np.float32) for i in range(12)]
        answers = await asyncio.gather(*(batcher.predict({"input": x}) for x in inputs))
        await batcher.stop()
        return [(a[0].version, x, a[1][0]) for a, x in zip(answers, inputs, strict=True)]

    for version, x, out in asyncio.run(scenario()):
        assert version == 1
        assert np.allclose(out, loaded.session.run(None, {"input": x})[0], atol=1e-6)
    assert sum(sizes) == sum(1 + i % 3 for i in range(12))
    assert max(sizes) <= 8 and len(sizes) < 12  # joined, never over max_batch


def test_a_batch_runs_on_one_version_even_when_the_model_is_swapped_meanwhile() -> None:
    versions = [_loaded(1), _loaded(2)]
    current = {"v": versions[0]}

    async def scenario() -> list[tuple[int, bool]]:
        batcher = Batcher(lambda: current["v"], max_batch=4, max_wait=0.0, workers=2, inline_below=0)
        await batcher.start()
        x = np.ones((1, 4), np.float32)
        expected = {v.version: v.session.run(None, {"input": x})[0] for v in versions}

        async def one() -> tuple[int, bool]:
            loaded, out = await batcher.predict({"input": x})
            return loaded.version, bool(np.allclose(out[0], expected[loaded.version]))

        async def swap_soon(wave: int) -> None:
            await asyncio.sleep(0)  # after the wave's requests queued, before all batches ran
            current["v"] = versions[(wave + 1) % 2]

        results: list[tuple[int, bool]] = []
        for wave in range(6):
            answers = await asyncio.gather(*(one() for _ in range(10)), swap_soon(wave))
            results += [a for a in answers if a is not None]
        await batcher.stop()
        return results

    results = asyncio.run(scenario())
    assert all(ok for _, ok in results)  # each answer is the output of the version it names
    assert {v for v, _ in results} == {1, 2}


def test_without_batching_each_request_is_its_own_call() -> None:
    loaded = _loaded(1)
    sizes: list[int] = []

    async def scenario() -> None:
        batcher = Batcher(lambda: loaded, enabled=False, on_batch=sizes.append)
        await batcher.start()
        await asyncio.gather(*(batcher.predict({"input": np.ones((2, 4), np.float32)}) for _ in range(5)))
        await batcher.stop()

    asyncio.run(scenario())
    assert sizes == [2] * 5


def test_a_model_with_short_calls_runs_on_the_loop_and_a_lone_request_does_not_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import phalanx.serving.batching as batching

    loaded = _loaded(1)
    callers: list[str] = []
    original = batching.run

    def spy(loaded: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        callers.append(threading.current_thread().name)
        return original(loaded, inputs)

    monkeypatch.setattr(batching, "run", spy)

    async def scenario() -> tuple[bool, float, str]:
        # a long max_wait: a lone request (nothing else arriving) must not wait for it
        batcher = Batcher(lambda: loaded, max_wait=3600.0, inline_below=1.0)
        await batcher.start()
        x = {"input": np.ones((1, 4), np.float32)}
        started = time.monotonic()
        for _ in range(4):
            await batcher.predict(x)
        took = time.monotonic() - started
        inline = batcher.inline
        await batcher.stop()
        return inline, took, threading.current_thread().name

    inline, took, loop_thread = asyncio.run(scenario())
    assert took < 600  # none waited max_wait (an hour): a generous bound, far from both
    assert inline
    assert callers[0].startswith("phalanx-serve")  # a version's first call: in the pool, timed
    assert callers[-2:] == [loop_thread, loop_thread]  # then on the loop: no thread hop
