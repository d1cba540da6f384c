"""A notebook's kernels in a `kind: notebook` file's build environment (docs/services.md).

JupyterLab itself runs in Phalanx's environment; its kernels run the venv the file's ``build:``
describes, built and cached by the same rules as an experiment's (phalanx.buildenv), with the
ipykernel that this JupyterLab speaks to added. A kernel there imports what an experiment of the
same file imports, and the tracking SDK's copy (phalanx.sdkcopy), as a replica in a foreign venv
does. Jupyter is told of that kernel by a data folder (``JUPYTER_PATH``) holding its spec, named
``python3`` so that every notebook opens in it.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from phalanx.spec.model import Build

KERNEL = "python3"  # the name notebooks ask for: theirs opens in the build's environment
# JupyterLab's own kernel (Phalanx's environment) is not offered beside it
NO_NATIVE_KERNEL = "--KernelSpecManager.ensure_native_kernel=False"
_IPYKERNEL = re.compile(r"^\s*ipykernel\b", re.IGNORECASE)


def kernel_build(build: Build) -> Build:
    """``build`` with ipykernel, at the version Phalanx's JupyterLab runs, unless it names one."""
    if any(_IPYKERNEL.match(p) for p in build.pip_packages):
        return build
    pinned = f"ipykernel=={metadata.version('ipykernel')}"
    return replace(build, pip_packages=(*build.pip_packages, pinned))


def write_kernel(folder: Path, python: Path, sdk: Path, label: str) -> Path:
    """A Jupyter data folder (for ``JUPYTER_PATH``) whose ``python3`` kernel runs ``python``, the
    SDK copy ``sdk`` on its path; ``label``: how JupyterLab names it. Returns ``folder``."""
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    doc = {
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({label})",
        "language": "python",
        "env": {"PYTHONPATH": str(sdk)},
        "metadata": {"debugger": True},
    }
    (spec / "kernel.json").write_text(json.dumps(doc, indent=2))
    return folder


def environment_label(python: Path) -> str:
    """What the kernel is named after: its environment's hash (the venvs folder's name for it)."""
    return f"environment {python.parent.parent.name}"
