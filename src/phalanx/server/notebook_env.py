"""A notebook's build environment on the server: a `kind: notebook` file's ``build:`` made into a
cached venv (phalanx.buildenv) as the project's account, in its box, as an experiment's is; its
kernels then run there (phalanx.services.kernels).

The file's requirements file reaches the server as its text: it is written into a folder of its
own for the build (a ``-r`` or ``-e`` naming another local file is not followed there).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from phalanx import buildenv
from phalanx.machine import box
from phalanx.machine.box import Isolation
from phalanx.services.kernels import environment_label, kernel_build, write_kernel
from phalanx.spec.model import Build

REQUIREMENTS = "requirements.txt"


@dataclass(frozen=True)
class Kernel:
    """Where a notebook's kernels run: ``python`` (its venv's), the Jupyter data folder that names
    it (``JUPYTER_PATH``), and what its box reads for it."""

    python: Path
    data: Path
    reads: tuple[str, ...]
    label: str


def build_environment(
    home: Path, build: Build, requirements: str | None, isolation: Isolation | None
) -> Path:
    """The python of ``build`` with ipykernel, built on first use under ``home``/venvs (as the
    project's account when ``isolation``); UsageError with pip's last lines when it fails."""
    (home / "services").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".notebook-build-", dir=home / "services"))
    try:
        os.chmod(work, 0o755)  # the build's box reads it as the project's account
        if requirements is not None:
            (work / REQUIREMENTS).write_text(requirements)
            os.chmod(work / REQUIREMENTS, 0o644)
        wanted = kernel_build(
            Build(
                pip_packages=build.pip_packages,
                requirements=REQUIREMENTS if requirements is not None else None,
                build_steps=build.build_steps,
                env_vars=build.env_vars,
            )
        )
        return buildenv.ensure_env(wanted, work, home / "venvs", box=isolation)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def kernel_in(folder: Path, python: Path, sdk: Path) -> Kernel:
    """The kernel of a notebook service whose folder is ``folder``, running ``python``."""
    label = environment_label(python)
    data = write_kernel(folder / "jupyter", python, sdk, label)
    return Kernel(python, data, (*box.interpreter_trees(str(python)), str(data), str(sdk)), label)
