"""`python -m phalanx.registry.parity_child MEMORY_BYTES`: the registry's parity check and signature
of one ONNX file, in a process of their own (phalanx.registry.parity_process starts it).

Standard input: the model's metadata as one line of JSON, then the ONNX file's bytes. Standard
output: one JSON object, ``{"parity": Parity.as_dict(), "signature": {...} or null}`` (the
signature only when the check passed), or ``{"refused": "why"}`` for a model the check refuses
before running it (no example input kept, external data). Anything else (a crash of onnxruntime,
a traceback, no answer) is the parent's to report.

A server runs it for every registration (the file was written by an editor's job, or uploaded, and
is input to a large native library, which must not run in the server's own process): in the
project's box as the project's account when the server boxes it, else as a plain child process with
an allow-listed environment. ``MEMORY_BYTES`` (0: none) caps its address space before onnxruntime is
loaded, so a model that asks for more memory than a check needs fails to allocate rather than fill
the machine.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

from phalanx.errors import UsageError
from phalanx.registry.parity import recheck, signature


def single_threaded() -> Any:
    """Session options for the check: one batch needs no thread pool, and a thread per core
    would take address space (stacks, malloc arenas) the memory cap counts."""
    import onnxruntime as ort  # why: onnxruntime is optional (the `serve` extra)

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return options


def answer(onnx_bytes: bytes, metadata: dict[str, Any]) -> dict[str, Any]:
    """The check's answer for ``onnx_bytes``, as the parent reads it."""
    try:
        parity = recheck(onnx_bytes, metadata, single_threaded())
        shape = signature(onnx_bytes, single_threaded()) if parity.passed else None
    except UsageError as exc:
        return {"refused": str(exc)}
    return {"parity": parity.as_dict(), "signature": shape}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        sys.stderr.write("usage: python -m phalanx.registry.parity_child MEMORY_BYTES < metadata+model\n")
        return 2
    most = int(argv[0])
    if most:
        resource.setrlimit(resource.RLIMIT_AS, (most, most))
    metadata = json.loads(sys.stdin.buffer.readline())
    onnx_bytes = sys.stdin.buffer.read()
    sys.stdout.write(json.dumps(answer(onnx_bytes, metadata)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
