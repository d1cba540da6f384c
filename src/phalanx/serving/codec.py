"""Request bodies -> the model's inputs, checked against its signature; outputs -> response bodies.

Accepted bodies:
- JSON ``{"inputs": [[...], ...]}`` for a one-input model, or ``{"inputs": {"NAME": [[...]], ...}}``;
  JSON numbers are cast to the input's dtype (an integer input refuses fractional numbers);
- ``application/x-npy``: one ``.npy`` array (a one-input model), its dtype exactly the input's;
- ``application/x-npz``: an ``.npz`` of named arrays (``numpy.savez``), dtypes exact.
Every refusal is an ``InvalidInput`` (HTTP 422) naming the input, the expected dtype and shape, and
what came.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from phalanx.errors import PhalanxError

NPY = "application/x-npy"
NPZ = "application/x-npz"


class InvalidInput(PhalanxError):
    """A request whose inputs do not match the model's signature (422)."""

    code = "invalid_input"


def describe(spec: dict[str, Any]) -> str:
    dims = ", ".join("?" if d is None else str(d) for d in spec["shape"])
    return f"{spec['dtype']}[{dims}]"


def _got(arr: np.ndarray) -> str:
    return f"{arr.dtype}[{', '.join(map(str, arr.shape))}]"


def decode(body: bytes, content_type: str, signature: dict[str, Any]) -> dict[str, np.ndarray]:
    """The request's arrays by input name, each checked (dtype, rank, fixed dimensions, one batch
    size for all). Raises InvalidInput."""
    specs = {s["name"]: s for s in signature.get("inputs", [])}
    kind = content_type.split(";")[0].strip().lower()
    if kind == NPY:
        if len(specs) != 1:
            raise InvalidInput(
                f"this model takes {len(specs)} inputs ({', '.join(specs)}): send them as {NPZ}"
            )
        raw = {next(iter(specs)): _load_npy(body)}
        arrays = {n: _check_exact(specs[n], a) for n, a in raw.items()}
    elif kind == NPZ:
        try:
            with np.load(io.BytesIO(body), allow_pickle=False) as npz:
                raw = {n: npz[n] for n in npz.files}
        except Exception as exc:  # numpy raises several types for a malformed archive
            raise InvalidInput(f"the body is not an .npz archive of arrays: {exc}") from None
        _names(specs, raw)
        arrays = {n: _check_exact(specs[n], a) for n, a in raw.items()}
    else:
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise InvalidInput(
                f'the body is not JSON ({exc}); send {{"inputs": ...}} or an {NPY} body'
            ) from None
        if not isinstance(doc, dict) or "inputs" not in doc:
            raise InvalidInput('send {"inputs": [[...]]} or {"inputs": {"NAME": [[...]]}}')
        given = doc["inputs"]
        if not isinstance(given, dict):
            if len(specs) != 1:
                raise InvalidInput(
                    f'this model takes inputs {", ".join(specs)}: send {{"inputs": {{NAME: ...}}}}'
                )
            given = {next(iter(specs)): given}
        _names(specs, given)
        arrays = {n: _from_json(specs[n], v) for n, v in given.items()}
    batches = {a.shape[0] for a in arrays.values()}
    if len(batches) > 1:
        sizes = ", ".join(f"{n}: {a.shape[0]}" for n, a in arrays.items())
        raise InvalidInput(f"inputs have different batch sizes ({sizes})")
    return arrays


def _load_npy(body: bytes) -> np.ndarray:
    try:
        arr: np.ndarray = np.load(io.BytesIO(body), allow_pickle=False)
    except Exception as exc:  # numpy raises several types for a malformed file
        raise InvalidInput(f"the body is not an .npy array: {exc}") from None
    return arr


def _names(specs: dict[str, Any], given: dict[str, Any]) -> None:
    unknown = [n for n in given if n not in specs]
    missing = [n for n in specs if n not in given]
    if unknown or missing:
        expected = ", ".join(f"{n}: {describe(s)}" for n, s in specs.items())
        what = f"unknown input {unknown[0]!r}" if unknown else f"missing input {missing[0]!r}"
        raise InvalidInput(f"{what}; this model takes {expected}")


def _check_shape(spec: dict[str, Any], arr: np.ndarray) -> np.ndarray:
    shape = spec["shape"]
    fits = arr.ndim == len(shape) and all(d is None or d == g for d, g in zip(shape, arr.shape, strict=True))
    if not fits or arr.ndim == 0:
        raise InvalidInput(f"input {spec['name']!r}: expected {describe(spec)}, got shape {_got(arr)}")
    return arr


def _check_exact(spec: dict[str, Any], arr: np.ndarray) -> np.ndarray:
    if arr.dtype != np.dtype(spec["dtype"]):
        raise InvalidInput(
            f"input {spec['name']!r}: expected {describe(spec)}, got dtype {_got(arr)}; "
            f"convert it first (array.astype('{spec['dtype']}'))"
        )
    return _check_shape(spec, arr)


def _from_json(spec: dict[str, Any], value: Any) -> np.ndarray:
    want = np.dtype(spec["dtype"])
    try:
        arr = np.asarray(value)
    except ValueError:
        arr = np.asarray([], dtype=object)
    if arr.dtype == object or arr.dtype.kind in "US":
        raise InvalidInput(
            f"input {spec['name']!r}: expected {describe(spec)}, got a value that is not a rectangular array "
            "of numbers"
        )
    if want.kind in "iub" and arr.dtype.kind == "f":
        raise InvalidInput(
            f"input {spec['name']!r}: expected {describe(spec)}, got dtype {_got(arr)} (fractions)"
        )
    return _check_shape(spec, arr.astype(want, copy=False))


def encode_npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def encode_npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()
