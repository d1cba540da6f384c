"""How the server reads the end of a boxed parity check's process (phalanx.registry.parity_process):
its answer becomes the parity figure and signature; a crash, a deadline passed, an answer too long
or not one becomes a refusal that says what happened (the process itself: tests/integration/
isolation/test_hostile_models.py)."""

from __future__ import annotations

import json

import pytest

from phalanx.errors import UsageError
from phalanx.registry.checker import CheckStopped
from phalanx.registry.parity import Parity, ParityFailed
from phalanx.registry.parity_process import ANSWER_MOST, Ran, read_answer

PASSED = Parity(True, 1e-7, 1e-3, 1e-5, "onnxruntime 1.31.1")
SIGNATURE = {"inputs": [{"name": "input", "dtype": "float32", "shape": [None, 4]}], "outputs": []}


def ended(out: bytes = b"", status: int = 0, errors: bytes = b"", **how: bool) -> Ran:
    return Ran(
        status,
        out,
        errors,
        how.get("timed_out", False),
        how.get("overflow", False),
        how.get("stopped", False),
    )


def refusal(ran: Ran) -> str:
    with pytest.raises(ParityFailed) as refused:
        read_answer(ran, "3f2a9c41d0e2/digits.onnx", 300)
    said = str(refused.value)
    assert said.startswith("3f2a9c41d0e2/digits.onnx: ") and said.endswith("refusing to register it")
    return said


def test_an_answer_is_the_parity_figure_and_the_signature() -> None:
    out = json.dumps({"parity": PASSED.as_dict(), "signature": SIGNATURE}).encode()
    checked = read_answer(ended(out), "e/m.onnx", 300)
    assert checked.parity == PASSED and checked.signature == SIGNATURE
    failed = Parity(False, float("inf"), 1e-3, 1e-5, "onnxruntime 1.31.1", "the file does not run: x")
    out = json.dumps({"parity": failed.as_dict(), "signature": None}).encode()
    assert read_answer(ended(out), "e/m.onnx", 300).parity == failed


def test_a_model_the_check_refuses_before_running_it_is_a_usage_error_with_its_reason() -> None:
    out = json.dumps({"refused": "the model keeps no example input to re-run its ONNX check on"}).encode()
    with pytest.raises(UsageError, match=r"^the model keeps no example input") as refused:
        read_answer(ended(out), "e/m.onnx", 300)
    assert not isinstance(refused.value, ParityFailed)


def test_a_killed_or_failed_process_is_refused_with_how_it_ended_and_its_last_error() -> None:
    said = refusal(ended(status=137, errors=b"onnxruntime: something\nSegfault in Loop\n"))
    assert "ended without an answer (killed by SIGKILL: Segfault in Loop)" in said
    assert "(killed by SIGSEGV)" in refusal(ended(status=-11))
    assert "(exit status 1: MemoryError)" in refusal(ended(status=1, errors=b"Traceback...\nMemoryError\n"))


def test_a_check_past_its_deadline_is_refused_saying_so() -> None:
    assert "did not finish within 300 s" in refusal(ended(status=-9, timed_out=True))


def test_a_check_stopped_because_its_client_went_away_says_so_not_how_its_process_was_killed() -> None:
    with pytest.raises(
        CheckStopped, match=r"^e/m.onnx: the registration was given up \(its client went away\)"
    ):
        read_answer(ended(status=-9, stopped=True), "e/m.onnx", 300)


@pytest.mark.parametrize(
    ("out", "why"),
    [
        (b"", "Expecting value"),
        (b"Segmentation fault", "Expecting value"),
        (b"[1, 2]", "not an answer"),
        (json.dumps({"parity": {**PASSED.as_dict(), "passed": "yes"}, "signature": None}).encode(), "parity"),
        (json.dumps({"parity": {**PASSED.as_dict(), "rtol": True}, "signature": None}).encode(), "parity"),
        (json.dumps({"parity": PASSED.as_dict(), "signature": "x"}).encode(), "not an answer"),
        (json.dumps({"signature": None}).encode(), "not an object"),
    ],
)
def test_an_answer_that_is_not_one_is_refused_never_taken(out: bytes, why: str) -> None:
    said = refusal(ended(out))
    assert "the parity check's answer could not be read (" in said and why in said


def test_an_answer_longer_than_kept_is_refused() -> None:
    out = json.dumps({"parity": PASSED.as_dict(), "signature": SIGNATURE}).encode()
    assert f"more than {ANSWER_MOST:,} bytes" in refusal(ended(out, overflow=True))
