"""Re-run save_model's ONNX check on stored bytes: the registry's guard against a model file that was
altered or corrupted after it was checked.

save_model keeps the check's example input and PyTorch's output in the ONNX model's metadata
(``parity``, see phalanx.tracking.models); here the stored file is loaded with onnxruntime and run
on that input, and the output is compared within the check's own tolerances. The max abs difference
is the *parity figure* that the registry records and that a refusal names.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from phalanx.errors import UsageError
from phalanx.registry.onnx_load import open_session


class ParityFailed(UsageError):
    """The stored ONNX file does not compute what it computed when it was saved (or does not load)."""


@dataclass(frozen=True)
class Parity:
    passed: bool
    max_abs_diff: float
    rtol: float
    atol: float
    runtime: str
    problem: str | None = None  # why it failed other than by the numbers (a file that does not load)

    def figure(self) -> str:
        if self.problem:
            return self.problem
        return f"max abs diff {self.max_abs_diff:.3g} (allowed rtol {self.rtol:g}, atol {self.atol:g})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "max_abs_diff": self.max_abs_diff,
            "rtol": self.rtol,
            "atol": self.atol,
            "runtime": self.runtime,
            "problem": self.problem,
        }

    @classmethod
    def from_dict(cls, doc: Any) -> Parity:
        """As ``as_dict`` wrote it (the answer of a check's own process); ValueError for anything
        else, field types included."""
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        numbers = [doc.get(key) for key in ("max_abs_diff", "rtol", "atol")]
        if (
            not isinstance(doc.get("passed"), bool)
            or not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers)
            or not isinstance(doc.get("runtime"), str)
            or not isinstance(doc.get("problem"), str | None)
        ):
            raise ValueError(f"not a parity check's result: {sorted(doc)}")
        diff, rtol, atol = (float(n) for n in numbers)  # type: ignore[arg-type]
        return cls(doc["passed"], diff, rtol, atol, doc["runtime"], doc.get("problem"))


def decode_array(record: dict[str, Any]) -> Any:
    """One of the metadata's arrays (base64 of the raw bytes, dtype, shape) as a numpy array."""
    import numpy as np  # why: numpy is optional (the `serve` extra)

    raw = base64.b64decode(record["data"])
    return np.frombuffer(raw, dtype=np.dtype(record["dtype"])).reshape(record["shape"]).copy()


def recheck(onnx_bytes: bytes, metadata: dict[str, Any], options: Any = None) -> Parity:
    """Run ``onnx_bytes`` on the saved example input and compare with the saved output.
    ``options``: the onnxruntime SessionOptions to load it with (its defaults when None).

    Raises:
        UsageError: the metadata keeps no example input (a model saved before inputs were kept, or
            one whose example batch was too large to keep); save the model again.
    """
    import numpy as np  # why: numpy is optional (the `serve` extra)
    import onnxruntime as ort  # why: onnxruntime is optional (the `serve` extra)

    parity = metadata.get("parity")
    check = metadata.get("check") if isinstance(metadata.get("check"), dict) else {}
    rtol = float(check.get("rtol", 1e-3)) if check else 1e-3
    atol = float(check.get("atol", 1e-5)) if check else 1e-5
    runtime = f"onnxruntime {ort.__version__}"
    if not isinstance(parity, dict) or not parity.get("inputs"):
        why = metadata.get("parity_omitted") or "it was saved before save_model kept its check's input"
        raise UsageError(
            f"the model keeps no example input to re-run its ONNX check on ({why}); save it again "
            "with task.save_model(model, name, example_input=one_small_batch)"
        )
    try:
        session = open_session(onnx_bytes, options)
        feed = {r["name"]: decode_array(r) for r in parity["inputs"]}
        got = session.run(None, feed)
    except Exception as exc:  # onnxruntime raises its own types for a corrupt or mismatched file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Parity(False, float("inf"), rtol, atol, runtime, f"the file does not run: {first[:300]}")
    expected = [decode_array(r) for r in parity["outputs"]]
    passed = len(got) == len(expected)
    worst = 0.0
    for g, e in zip(got, expected, strict=False):
        g_arr = np.asarray(g)
        if g_arr.shape != e.shape:
            return Parity(
                False, float("inf"), rtol, atol, runtime, f"output shape {g_arr.shape} != saved {e.shape}"
            )
        if e.size:
            diff = np.abs(g_arr.astype(np.float64) - e.astype(np.float64))
            worst = max(worst, float(np.nan_to_num(diff, nan=np.inf).max()))
        passed = passed and bool(np.allclose(g_arr, e, rtol=rtol, atol=atol))
    return Parity(passed, worst, rtol, atol, runtime)


def signature(onnx_bytes: bytes, options: Any = None) -> dict[str, Any]:
    """Input and output names, dtypes (numpy's names) and shapes (None for a dynamic axis) of the
    ONNX graph: what a serving endpoint checks a request against."""
    session = open_session(onnx_bytes, options)

    def describe(args: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": a.name,
                "dtype": onnx_dtype(a.type),
                "shape": [d if isinstance(d, int) else None for d in a.shape],
            }
            for a in args
        ]

    return {"inputs": describe(session.get_inputs()), "outputs": describe(session.get_outputs())}


_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


def onnx_dtype(ort_type: str) -> str:
    return _ORT_TYPES.get(ort_type, ort_type)
