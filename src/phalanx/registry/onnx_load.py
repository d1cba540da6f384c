"""Loading an ONNX file somebody sent (the registry's parity check and signature, a serving
replica's model) without letting it name a file of this machine.

ONNX "external data" lets a tensor keep its bytes in another file, named by a relative path;
onnxruntime reads it from the loading process's working directory when the model comes as bytes
(any path below it, ``../x`` that ends there included): an editor's model made the server read its
own secrets key, token and store as root and report their bytes in the parity figure. Two layers:

- ``refuse_external_data``: the file is refused when any tensor names external data (save_model
  writes one self-contained file, so nothing Phalanx saves has any);
- ``open_session``: onnxruntime is told the bytes are ONNX (not its own ORT format, which the first
  layer does not read) and loads them from a file alone in a fresh private folder, so a relative
  reference the first layer missed could name no file but that one (an absolute one onnxruntime
  refuses itself from 1.24 on, the least the `serve` extra installs).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from phalanx.errors import UsageError

CPU = ["CPUExecutionProvider"]


def open_session(onnx_bytes: bytes, options: Any = None, providers: list[str] | None = None) -> Any:
    """An onnxruntime InferenceSession of ``onnx_bytes`` (UsageError when it names external data;
    onnxruntime's own error when it does not load). ``options``: a SessionOptions to start from."""
    import onnxruntime as ort  # why: onnxruntime is optional (the `serve` extra)

    refuse_external_data(onnx_bytes)
    options = options if options is not None else ort.SessionOptions()
    options.add_session_config_entry("session.load_model_format", "ONNX")
    with tempfile.TemporaryDirectory(prefix="phalanx-onnx-") as folder:  # 0700, empty but the model
        path = Path(folder) / "model.onnx"
        path.write_bytes(onnx_bytes)
        return ort.InferenceSession(str(path), sess_options=options, providers=providers or CPU)


# The messages of onnx.proto that hold tensors, and in which fields (field number -> message).
_TENSOR_HOLDERS: dict[str, dict[int, str]] = {
    "model": {7: "graph", 20: "training", 25: "function"},
    "training": {1: "graph", 2: "graph"},
    "function": {7: "node", 11: "attribute"},
    "graph": {1: "node", 5: "tensor", 15: "sparse"},
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse"},
    "sparse": {1: "tensor", 2: "tensor"},
    "tensor": {},
}
_EXTERNAL_DATA, _DATA_LOCATION = 13, 14  # TensorProto's external_data and data_location fields


def refuse_external_data(onnx_bytes: bytes) -> None:
    """UsageError when a tensor of the ONNX file keeps its bytes in another file (``data_location:
    EXTERNAL``). onnxruntime reads such a file from the loading process's working directory, any path
    below it (``../x`` that ends there included): a model sent by an editor would make the server
    read a file of its machine (its secrets key, its token, its store) and report the numbers it
    computed from it (the parity figure). save_model writes one self-contained file, so nothing
    Phalanx saves has external data; a file this walk cannot read is left to onnxruntime, which
    refuses it as well."""
    stack: list[tuple[str, int, int]] = [("model", 0, len(onnx_bytes))]
    while stack:
        kind, pos, end = stack.pop()
        while pos < end:
            key, pos = _varint(onnx_bytes, pos, end)
            if pos < 0:
                break
            # protobuf keeps a tag's low 32 bits (a padded tag, 106 + 2**32, is external_data to it)
            key &= 0xFFFFFFFF
            field, wire = key >> 3, key & 7
            external = kind == "tensor" and field == _EXTERNAL_DATA
            if wire == 0:
                value, pos = _varint(onnx_bytes, pos, end)
                external = external or (kind == "tensor" and field == _DATA_LOCATION and value != 0)
            if external:
                raise UsageError(
                    "the ONNX file keeps tensor data in another file (external data): a model must be"
                    " one self-contained file (task.save_model writes one); refusing to load it"
                )
            if wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                size, pos = _varint(onnx_bytes, pos, end)
                if pos < 0 or pos + size > end:
                    break
                inner = _TENSOR_HOLDERS[kind].get(field)
                if inner is not None:
                    stack.append((inner, pos, pos + size))
                pos += size
            elif wire not in (0, 3, 4):  # (a group's fields are read as its holder's: onnx.proto has none)
                break
            if pos < 0:
                break


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; (0, -1) when it is cut off or too long."""
    value = shift = 0
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return 0, -1
