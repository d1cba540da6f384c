"""What a framework estimator's environment always holds, whatever else the user lists.

Azure's PyTorch and TensorFlow estimators run in an image that has the framework, so
``PyTorch(..., pip_packages=['scikit-learn'])`` still imports torch there. Phalanx builds a venv from
``pip_packages`` instead, and a venv holds only what it is given: so the estimator adds its framework
(and, for PyTorch, what ``task.save_model`` needs to export and check ONNX) unless the user already
names it, in which case the user's pin wins. Without any package to install a PyTorch estimator runs in
Phalanx's own interpreter, which has torch; a Horovod (``distributed_backend='mpi'``) or TensorFlow
estimator always gets a venv, since Phalanx's interpreter has neither Horovod nor TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from phalanx.domain import Framework
from phalanx.machine.box import read_file
from phalanx.spec.model import REQUIREMENTS_MAX_BYTES

# What task.save_model imports: torch.onnx's exporter (onnx, onnxscript), the check (onnxruntime,
# numpy). Pinned to the versions Phalanx itself runs with when it has them (tested together).
ONNX_PACKAGES = ("numpy", "onnx", "onnxscript", "onnxruntime")
TENSORFLOW_PIN = "tensorflow-cpu==2.21.0"  # the CPU build this machine's package sources hold
_TENSORFLOW_NAMES = frozenset(
    {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "intel-tensorflow"}
)
_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def package_name(entry: str) -> str | None:
    """The normalised distribution name of a pip requirement ("Torch == 2.13" -> "torch"); None for
    an option line (``--extra-index-url ...``) or a path."""
    if entry.lstrip().startswith("-") or "/" in entry:
        return None
    m = _NAME.match(entry)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else None


def named(packages: Iterable[str]) -> set[str]:
    return {n for n in (package_name(p) for p in packages) if n}


def pinned(name: str) -> str:
    """``name==<the version Phalanx runs with>``, or the bare name when Phalanx does not have it."""
    from importlib import metadata  # why: only for a venv to build (`from phalanx import Experiment`)

    try:
        return f"{name}=={metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return name


def requirement_lines(path: str | None) -> list[str]:
    """The requirement lines of a requirements file (unreadable: none; buildenv reports it later).
    Only a regular file (a link to one is common: requirements.txt -> requirements/prod.txt) of at
    most a MiB: root reads it on a server (the Horovod path), and a file named /dev/zero or a fifo
    must not be read forever. What comes out is only which packages it names."""
    if path is None:
        return []
    try:
        text = read_file(path, REQUIREMENTS_MAX_BYTES).decode("utf-8", "replace")
    except OSError:  # a device, a fifo, a folder, more than a MiB
        return []
    return [line.split(" #", 1)[0].strip() for line in text.splitlines() if line.strip()]


def framework_packages(
    framework: Framework | None, pip_packages: Sequence[str], requirements: str | None
) -> tuple[str, ...]:
    """``pip_packages`` plus what the framework's environment must hold and the user did not name.

    PyTorch with packages to install (a venv) and Horovod: torch at this machine's pin and the ONNX
    pieces; TensorFlow: tensorflow-cpu. Nothing is added where no venv would be built for PyTorch.
    """
    from phalanx.buildenv import torch_pin  # why: only for a venv to build (`from phalanx import Experiment`)

    have = named([*pip_packages, *requirement_lines(requirements)])
    wanted: list[str] = []
    if framework is Framework.HOROVOD or (
        framework is Framework.PYTORCH and (pip_packages or requirements is not None)
    ):
        wanted = [f"torch=={torch_pin()}", *(pinned(n) for n in ONNX_PACKAGES)]
    elif framework is Framework.TENSORFLOW and not have & _TENSORFLOW_NAMES:
        wanted = [TENSORFLOW_PIN]
    extra = [w for w in wanted if package_name(w) not in have]
    return (*pip_packages, *extra)
