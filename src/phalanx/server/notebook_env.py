"""A notebook's build environment on the server: a `kind: notebook` file's ``build:`` made into a
cached venv (phalanx.buildenv) as the project's account, in its box, as an experiment's is; its
kernels then run there (phalanx.services.kernels).

The file's requirements file reaches the server as its text: it is written into a folder of its
own for the build (a ``-r`` or ``-e`` naming another local file is not followed there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from phalanx import buildenv
from phalanx.backends.local.boxes import PACKAGE_ROOT
from phalanx.errors import UsageError
from phalanx.machine import box
from phalanx.machine.box import Isolation
from phalanx.services.kernels import environment_label, kernel_build, write_kernel
from phalanx.spec.model import Build

REQUIREMENTS = "requirements.txt"
CODE = "code"  # in the project's notebook folder: the code the notebook was last started with
UNPACK_SECONDS = 300.0


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


def unpack_code(bundle: bytes, work: Path, isolation: Isolation | None) -> None:
    """The submitter's code (a .tar.gz bundle) in ``work``/code, in place of the one before: as the
    project's account in its box when the server boxes (the folder is that account's: root there
    could follow a link it planted); UsageError for a bundle refused, with the reason."""
    argv = [sys.executable, "-P", "-m", "phalanx.services.code_unpack", str(work / CODE)]
    env = {"PATH": box.BOX_PATH, "PYTHONPATH": PACKAGE_ROOT}
    if isolation is not None:
        layout = box.Layout(
            cwd=str(work), tmp=None, rw=(str(work),), ro=(PACKAGE_ROOT, *box.interpreter_trees())
        )
        argv = box.box_argv(isolation, layout) + argv
        env.update(box.box_env(isolation, str(work)), PYTHONPATH=PACKAGE_ROOT)
    done = subprocess.run(argv, input=bundle, env=env, cwd=work, capture_output=True, timeout=UNPACK_SECONDS)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise UsageError(f"the notebook's code could not be unpacked: {why[0]}")


def kernel_in(folder: Path, python: Path, sdk: Path) -> Kernel:
    """The kernel of a notebook service whose folder is ``folder``, running ``python``."""
    label = environment_label(python)
    data = write_kernel(folder / "jupyter", python, sdk, label)
    return Kernel(python, data, (*box.interpreter_trees(str(python)), str(data), str(sdk)), label)
