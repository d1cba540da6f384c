"""Small ONNX models for the registry and serving tests, built with onnx's helpers (no torch export,
which costs seconds a model), and recorded into a store as save_model records them: the file in the
experiment's artifact folder and a MODEL event whose metadata carries the check, the sha256 and the
parity arrays (phalanx.tracking.models)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from phalanx.domain import Event, EventKind
from phalanx.tracking.models import _parity_arrays


def linear_onnx(weights: np.ndarray, bias: np.ndarray) -> bytes:
    """``output = input @ weights + bias``; input float32 [batch, in], batch dynamic."""
    from onnx import TensorProto, helper, numpy_helper

    n_in, n_out = weights.shape
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["input", "W"], ["mm"]),
            helper.make_node("Add", ["mm", "B"], ["output"]),
        ],
        "linear",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", n_in])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", n_out])],
        [
            numpy_helper.from_array(weights.astype(np.float32), "W"),
            numpy_helper.from_array(bias.astype(np.float32), "B"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def random_linear(seed: int, n_in: int = 64, n_out: int = 10) -> bytes:
    rng = np.random.default_rng(seed)
    return linear_onnx(rng.normal(size=(n_in, n_out)), rng.normal(size=n_out))


def run_onnx(data: bytes, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    out: np.ndarray = session.run(None, {"input": x})[0]
    return out


def record_model(
    store: Any, experiment_id: str, name: str, data: bytes, n_in: int = 64, output: np.ndarray | None = None
) -> None:
    """Store ``data`` as experiment ``experiment_id``'s ONNX model ``name`` (with its check's
    example input and output), as save_model and ingest would. ``output``: the output recorded as
    the check's (default: what ``data`` computes, run here)."""
    x = np.random.default_rng(1).normal(size=(2, n_in)).astype(np.float32)
    path = f"models/{name}.onnx"
    store.artifact_store.put_bytes(experiment_id, path, data)
    metadata = {
        "model": name,
        "input_names": ["input"],
        "output_names": ["output"],
        "check": {"passed": True, "max_abs_diff": 0.0, "rtol": 1e-3, "atol": 1e-5},
        "sha256": hashlib.sha256(data).hexdigest(),
        **_parity_arrays(["input"], [x], ["output"], [run_onnx(data, x) if output is None else output]),
    }
    event = {"name": f"{name}.onnx", "format": "onnx", "path": path, "size": len(data), "metadata": metadata}
    store.write_events([Event(experiment_id, EventKind.MODEL, event)])


def spinning_onnx(n_in: int = 64) -> bytes:
    """``output = input``, after a Loop of 2**62 turns: a file that onnxruntime runs without end (a
    hostile model whose check would hold whatever runs it)."""
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["go"], ["go_on"]), helper.make_node("Identity", ["x"], ["x_on"])],
        "turn",
        [
            value("i", TensorProto.INT64, []),
            value("go", TensorProto.BOOL, []),
            value("x", TensorProto.FLOAT, None),
        ],
        [value("go_on", TensorProto.BOOL, []), value("x_on", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["turns", "go", "input"], ["output"], body=body)],
        "spin",
        [value("input", TensorProto.FLOAT, ["batch", n_in])],
        [value("output", TensorProto.FLOAT, ["batch", n_in])],
        [
            helper.make_tensor("turns", TensorProto.INT64, [], [2**62]),
            helper.make_tensor("go", TensorProto.BOOL, [], [True]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def hungry_onnx(mib: int, n_in: int = 64) -> bytes:
    """``output = input``, after making a float32 tensor of ``mib`` MiB (ConstantOfShape, summed
    into nothing): a file whose check asks onnxruntime for that much memory."""
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["size"], ["big"]),
            helper.make_node("ReduceSum", ["big"], ["total"], keepdims=0),
            helper.make_node("Mul", ["total", "zero"], ["nothing"]),
            helper.make_node("Add", ["input", "nothing"], ["output"]),
        ],
        "hungry",
        [value("input", TensorProto.FLOAT, ["batch", n_in])],
        [value("output", TensorProto.FLOAT, ["batch", n_in])],
        [
            helper.make_tensor("size", TensorProto.INT64, [1], [mib * 2**18]),
            helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def tamper(store: Any, experiment_id: str, name: str) -> None:
    """Change one weight of the stored file in place, as a corrupted or hand-edited copy would."""
    import onnx
    from onnx import numpy_helper

    path = f"models/{name}.onnx"
    model = onnx.load_from_string(store.artifact_store.read_bytes(experiment_id, path))
    w = numpy_helper.to_array(model.graph.initializer[0]).copy()
    w[0, 0] += 0.5
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "W"))
    store.artifact_store.put_bytes(experiment_id, path, model.SerializeToString())


def external_data_onnx(location: str, size: int = 16, where: str = "initializer") -> bytes:
    """``output = input + sum(W)`` where W (``size`` bytes, uint8) lies in the file ``location``
    (ONNX external data, which onnxruntime reads from its working directory): what a hostile
    editor sends to make the loading process read a file of its machine. ``where``: W is the
    graph's ``initializer``, or a Constant's ``subgraph`` value inside an If's branch."""
    from onnx import TensorProto, helper

    w = TensorProto(name="W", data_type=TensorProto.UINT8, dims=[size], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("length", str(size))):
        w.external_data.add(key=key, value=value)
    use = [
        helper.make_node("Cast", ["W"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["wf"], ["s"], keepdims=0),
        helper.make_node("Add", ["input", "s"], ["output"]),
    ]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1])]
    if where == "initializer":
        graph = helper.make_graph(use, "leak", inputs, outputs, [w])
    else:
        branch = helper.make_graph(
            [helper.make_node("Constant", [], ["W"], value=w), *use], "branch", [], outputs
        )
        cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
        graph = helper.make_graph(
            [helper.make_node("If", ["cond"], ["output"], then_branch=branch, else_branch=branch)],
            "leak",
            inputs,
            outputs,
            [cond],
        )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())
