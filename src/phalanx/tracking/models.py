"""task.save_model: a trained PyTorch model stored twice, as its weights and as a checked ONNX model.

Seed 004 ends with "export to ONNX for inference"; the trap is an exported model that silently
computes something else. So the ONNX file is run with onnxruntime on the example input and compared
with the PyTorch output (``numpy.allclose`` with rtol 1e-3 and atol 1e-5 by default) before anything
is recorded; a mismatch raises ModelCheckFailed and records nothing.

Both files then go the way artifacts go (copied into the spool, moved into the artifact store at
ingest) and are recorded as MODEL events: name, format ("pytorch" / "onnx"), path, size and metadata
(opset, exporter, input/output names and shapes, the check's max abs diff and tolerances).

Only global rank 0 saves by default (in DDP every rank holds the same weights): other ranks return
None, so the same line can stay in every rank's code. torch, onnx and onnxruntime are imported
inside the functions: the rest of phalanx.tracking stays standard-library only.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.errors import PhalanxError, UsageError

log = logging.getLogger(__name__)

RTOL = 1e-3
ATOL = 1e-5
MODELS_DIR = "models"  # the models' folder inside the experiment's artifact folder
# The check's inputs and outputs are kept in the ONNX model's metadata up to this many raw bytes, so
# the registry can re-run the check on the stored file (phalanx.registry.parity); one example batch
# of a typical model is far below it.
PARITY_MAX_BYTES = 1 << 20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class ModelCheckFailed(PhalanxError):
    """The ONNX model's output differs from the PyTorch model's on the example input."""

    code = "model_check_failed"


@dataclass(frozen=True)
class ExportedModel:
    """The files made by export_model, before they are recorded."""

    name: str
    weights: Path  # the state_dict (torch.save)
    onnx: Path | None
    weights_metadata: dict[str, Any] = field(default_factory=dict)
    onnx_metadata: dict[str, Any] = field(default_factory=dict)


def process_rank() -> int:
    """The global rank of this process: torch's RANK (set per process, as torchrun does), else the
    replica's PHALANX_RANK, else 0 (a plain script)."""
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PHALANX_RANK"):
        value = os.environ.get(var, "")
        if value.strip().lstrip("-").isdigit():
            return int(value)
    return 0


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name.endswith((".pt", ".onnx")):
        raise UsageError(
            f"model name {name!r}: use letters, digits, '.', '_' and '-' (at most 100), "
            "without a .pt/.onnx suffix (both files are stored)"
        )
    return name


def _unwrap(model: Any) -> Any:
    """The module inside DistributedDataParallel / DataParallel: its state_dict keys carry no
    'module.' prefix and it exports without the wrapper's hooks."""
    inner = getattr(model, "module", None)
    import torch  # why: torch is optional (the `ml` extra)

    if inner is not None and isinstance(
        model, torch.nn.parallel.DistributedDataParallel | torch.nn.DataParallel
    ):
        return inner
    return model


def _on_cpu(module: Any) -> Any:
    """The module itself when it is on the CPU, else a CPU copy. Export and check run on the CPU:
    the check compares the exporter's graph with PyTorch, not a GPU's arithmetic (TF32, fused
    kernels) with onnxruntime's CPU one, and the graph carries no device."""
    import torch  # why: torch is optional (the `ml` extra)

    tensors = [*module.parameters(), *module.buffers()]
    if all(t.device.type == "cpu" for t in tensors):
        return module
    copy_ = copy.deepcopy(module).to(torch.device("cpu"))
    copy_.train(module.training)
    return copy_


def _as_tuple(example_input: Any) -> tuple[Any, ...]:
    import torch  # why: torch is optional (the `ml` extra)

    if isinstance(example_input, torch.Tensor):
        return (example_input,)
    if isinstance(example_input, list | tuple) and all(isinstance(x, torch.Tensor) for x in example_input):
        return tuple(example_input)
    raise UsageError(
        "example_input: give a tensor (or a tuple of tensors) shaped like one batch, e.g. torch.zeros(1, 64)"
    )


def _outputs(value: Any) -> list[Any]:
    import torch  # why: torch is optional (the `ml` extra)

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [x for v in value for x in _outputs(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _outputs(v)]
    return []


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporter logs progress and library warnings (torchvision not installed, deprecations) that
    say nothing about the user's model; keep the training console readable."""
    names = ["torch.onnx", "torch.export", "torch._dynamo", "onnxscript"]
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)


def _export_onnx(
    model: Any,
    args: tuple[Any, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
    opset: int | None,
) -> str:
    """torch.onnx.export with the torch.export-based exporter (torch's default since 2.9; works
    offline with onnxscript), falling back to the TorchScript exporter for models it cannot trace.
    Returns the exporter used. The batch dimension is left dynamic."""
    import torch  # why: torch is optional (the `ml` extra)

    axes = {n: {0: "batch"} for n in [*input_names, *output_names]}
    errors: list[str] = []
    for dynamo in (True, False):
        kwargs: dict[str, Any] = {
            "input_names": input_names,
            "output_names": output_names,
            "dynamic_axes": axes,
            "dynamo": dynamo,
        }
        if opset is not None:
            kwargs["opset_version"] = opset
        if dynamo:
            kwargs["verbose"] = False
            # One self-contained file: by default the weights go to a `<name>.onnx.data` beside it,
            # which would not travel with the model (ONNX's protobuf limit makes this 2 GB at most).
            kwargs["external_data"] = False
        try:
            with _quiet_exporter():
                torch.onnx.export(model, args, str(path), **kwargs)
            return "dynamo" if dynamo else "torchscript"
        except Exception as exc:  # the exporters raise many unrelated types; report them all
            errors.append(
                f"{'torch.export' if dynamo else 'TorchScript'} exporter: {type(exc).__name__}: {exc}"
            )
            path.unlink(missing_ok=True)
    raise PhalanxError("the model could not be exported to ONNX:\n" + "\n".join(e[:2000] for e in errors))


def export_model(
    model: Any,
    name: str,
    example_input: Any,
    directory: str | os.PathLike[str],
    *,
    onnx: bool = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    opset: int | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> ExportedModel:
    """Write ``<name>.pt`` (the state_dict) and ``<name>.onnx`` into ``directory`` and check the ONNX
    model against PyTorch on ``example_input``.

    Raises:
        UsageError: not a torch module, a bad name or example input.
        ModelCheckFailed: onnxruntime's output is not within (rtol, atol) of PyTorch's.
        PhalanxError: neither exporter could export the model.
    """
    try:
        import torch  # why: torch is optional (the `ml` extra)
    except ImportError:  # an experiment venv without torch (the SDK copy itself needs none)
        raise UsageError(
            "save_model needs torch (and onnx, onnxruntime for the ONNX copy) where the experiment "
            "runs: add torch==2.13.0, onnx and onnxruntime to build.pip_packages"
        ) from None

    check_name(name)
    module = _unwrap(model)
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"save_model takes a torch.nn.Module, got {type(model).__name__}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = directory / f"{name}.pt"
    # CPU tensors: the file loads on any machine, with or without the GPU it was trained on.
    torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()}, weights)
    n_params = sum(int(p.numel()) for p in module.parameters())
    weights_meta: dict[str, Any] = {
        "model": name,
        "class": f"{type(module).__module__}.{type(module).__qualname__}",
        "content": "state_dict",
        "parameters": n_params,
        "torch_version": torch.__version__,
        "load": f"model.load_state_dict(torch.load('{name}.pt'))",
        "device": str(next(iter(module.parameters()), torch.empty(0)).device),
    }
    if not onnx:
        return ExportedModel(name, weights, None, weights_meta)
    if example_input is None:
        raise UsageError(
            "example_input: ONNX export traces the model on one batch; pass one, e.g. "
            "example_input=torch.zeros(1, 64), or onnx=False to store the weights only"
        )
    args = tuple(a.detach().cpu() for a in _as_tuple(example_input))
    module = _on_cpu(module)
    inputs = list(input_names or (["input"] if len(args) == 1 else [f"input_{i}" for i in range(len(args))]))
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            expected = [t.detach().cpu().numpy() for t in _outputs(module(*args))]
        outputs = list(
            output_names
            or (["output"] if len(expected) == 1 else [f"output_{i}" for i in range(len(expected))])
        )
        path = directory / f"{name}.onnx"
        started = time.perf_counter()
        exporter = _export_onnx(module, args, path, inputs, outputs, opset)
        export_seconds = time.perf_counter() - started
    finally:
        module.train(was_training)
    check = check_onnx(path, args, expected, inputs, rtol=rtol, atol=atol)
    if not check["passed"]:
        raise ModelCheckFailed(
            f"model {name!r}: the ONNX model's output differs from PyTorch's on example_input "
            f"(max abs diff {check['max_abs_diff']:.3g}, allowed rtol {rtol:g} atol {atol:g}); "
            "the model may use an operation the exporter translates differently"
        )
    import onnx as onnx_lib  # why: onnx is optional (the `ml` extra)

    proto = onnx_lib.load(str(path))
    onnx_meta: dict[str, Any] = {
        "model": name,
        "exporter": exporter,
        "opset": max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=None),
        "input_names": inputs,
        "output_names": outputs,
        "input_shapes": [list(a.shape) for a in args],
        "output_shapes": [list(e.shape) for e in expected],
        "dynamic_axes": {n: {"0": "batch"} for n in [*inputs, *outputs]},
        "check": check,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        **_parity_arrays(inputs, [a.numpy() for a in args], outputs, expected),
        "export_seconds": round(export_seconds, 3),
        "torch_version": torch.__version__,
        "onnx_version": onnx_lib.__version__,
    }
    return ExportedModel(name, weights, path, weights_meta, onnx_meta)


def _array_record(name: str, array: Any) -> dict[str, Any]:
    import numpy as np  # why: numpy is optional (the `ml` extra)

    arr = np.ascontiguousarray(array)
    return {
        "name": name,
        "dtype": arr.dtype.str,
        "shape": list(arr.shape),
        "data": base64.b64encode(arr.tobytes()).decode("ascii"),
    }


def _parity_arrays(
    input_names: Sequence[str], inputs: Sequence[Any], output_names: Sequence[str], outputs: Sequence[Any]
) -> dict[str, Any]:
    """``{"parity": {"inputs": [...], "outputs": [...]}}``: the check's example input and PyTorch's
    output (base64 of the raw array, dtype, shape), so the check can be run again on the stored file
    (a registry refuses a file that no longer computes them). Over PARITY_MAX_BYTES only a note."""
    total = sum(int(a.nbytes) for a in [*inputs, *outputs])
    if total > PARITY_MAX_BYTES:
        return {"parity_omitted": f"example input and output take {total} bytes (> {PARITY_MAX_BYTES})"}
    return {
        "parity": {
            "inputs": [_array_record(n, a) for n, a in zip(input_names, inputs, strict=False)],
            "outputs": [_array_record(n, a) for n, a in zip(output_names, outputs, strict=False)],
        }
    }


def check_onnx(
    path: str | os.PathLike[str],
    args: Sequence[Any],
    expected: Sequence[Any],
    input_names: Sequence[str],
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> dict[str, Any]:
    """Run the ONNX model with onnxruntime (CPU) and compare with ``expected`` (numpy arrays).
    Returns {"passed", "max_abs_diff", "rtol", "atol", "runtime"}."""
    import numpy as np  # why: numpy is optional (the `ml` extra)
    import onnxruntime as ort  # why: onnxruntime is optional (the `serve` extra)

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed_names = [i.name for i in session.get_inputs()]
    feed = {n: a.detach().cpu().numpy() for n, a in zip(feed_names or input_names, args, strict=False)}
    got = session.run(None, feed)
    passed = len(got) == len(expected)
    max_diff = 0.0
    for g, e in zip(got, expected, strict=False):
        g_arr, e_arr = np.asarray(g), np.asarray(e)
        if g_arr.shape != e_arr.shape:
            passed = False
            max_diff = float("inf")
            continue
        if e_arr.size:
            max_diff = max(
                max_diff, float(np.max(np.abs(g_arr.astype(np.float64) - e_arr.astype(np.float64))))
            )
        passed = passed and bool(np.allclose(g_arr, e_arr, rtol=rtol, atol=atol))
    return {
        "passed": passed,
        "max_abs_diff": max_diff,
        "rtol": rtol,
        "atol": atol,
        "runtime": f"onnxruntime {ort.__version__}",
    }


def save_model(
    task: Any,
    model: Any,
    name: str,
    example_input: Any = None,
    *,
    onnx: bool = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    opset: int | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
    all_ranks: bool = False,
) -> list[dict[str, Any]] | None:
    """Store ``model``'s weights (``<name>.pt``) and a checked ONNX export (``<name>.onnx``) as the
    experiment's models; what ``task.save_model(...)`` calls.

    Only global rank 0 saves unless ``all_ranks`` (then each rank's names get ``-rank<N>``); other
    ranks return None. Returns the MODEL records' data (name, format, path, size, metadata).

    Raises:
        UsageError, ModelCheckFailed, PhalanxError: see export_model; nothing is recorded then.
    """
    check_name(name)
    rank = process_rank()
    if rank != 0 and not all_ranks:
        log.debug(
            "save_model(%r) skipped on rank %d (only rank 0 saves; all_ranks=True to change)", name, rank
        )
        return None
    if all_ranks:
        name = f"{name}-rank{rank}"
    folder = Path(tempfile.mkdtemp(prefix="phalanx-model-"))
    try:
        exported = export_model(
            model,
            name,
            example_input,
            folder,
            onnx=onnx,
            input_names=input_names,
            output_names=output_names,
            opset=opset,
            rtol=rtol,
            atol=atol,
        )
        records = [("pytorch", exported.weights, exported.weights_metadata)]
        if exported.onnx is not None:
            records.append(("onnx", exported.onnx, exported.onnx_metadata))
        return [_record(task, fmt, path, {**meta, "rank": rank}) for fmt, path, meta in records]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _record(task: Any, fmt: str, path: Path, metadata: dict[str, Any]) -> dict[str, Any]:
    """Hand one file to the task's artifact machinery (copied into the spool now, moved into the
    artifact store at ingest) and record it as a MODEL event; returns the event's data."""
    target = f"{MODELS_DIR}/{path.name}"
    data: dict[str, Any] = {
        "name": path.name,
        "format": fmt,
        "path": target,
        "size": path.stat().st_size,
        "metadata": metadata,
    }
    task._record_model_file(path, data)
    return data
