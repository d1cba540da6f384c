"""Horovod for `framework: horovod` experiments: one wheel per (Horovod, torch, MPI), built once, cached.

Horovod 0.28.1, its last release, ships only as source and does not build against torch 2.13 as
released: its CMake files ask for C++14 and torch's headers need C++17. Phalanx downloads the sdist,
raises ``CMAKE_CXX_STANDARD`` to 17 in ``CMakeLists.txt`` and ``horovod/torch/CMakeLists.txt`` (the
only change), and builds a wheel with the PyTorch extension and both controllers (MPI and gloo),
without TensorFlow or MXNet, in a build venv holding the experiment's torch. The wheel is kept under
``<wheels dir>/horovod-<key>/``, the key being a hash of everything that goes into it (Horovod's
version, torch's, the MPI library's, the interpreter, the patch and the flags), so later
environments install it in seconds. Builders of the same key serialise on a lock; a failed build
publishes nothing.

The first build takes about 4 minutes on an idle 2-core machine (26 on a loaded one). To skip it,
point ``PHALANX_HOROVOD_WHEEL`` at a wheel built elsewhere (same Python, torch and MPI).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from phalanx import knobs
from phalanx.errors import UsageError

log = logging.getLogger(__name__)

HOROVOD_VERSION = "0.28.1"
PATCHED_FILES = ("CMakeLists.txt", "horovod/torch/CMakeLists.txt")
PATCH = ("CMAKE_CXX_STANDARD 14", "CMAKE_CXX_STANDARD 17")
BUILD_FLAGS = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
    "HOROVOD_WITH_MPI": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_CPU_OPERATIONS": "gloo",
}
BUILD_PACKAGES = ("setuptools", "wheel", "packaging", "pyyaml", "psutil", "cloudpickle", "cffi")
TOOLS = {
    "cmake": "cmake",
    "c++": "g++",
    "mpicxx": "libopenmpi-dev",
    "mpirun": "openmpi-bin",
}
PROGRESS_SECONDS = 30.0


def wheels_dir() -> Path:
    """Where built wheels are kept: $PHALANX_WHEELS_DIR, else ~/.cache/phalanx/wheels (machine-wide,
    so every PHALANX_HOME and every test run on the machine shares one build)."""
    return knobs.WHEELS_DIR.value() or Path.home() / ".cache" / "phalanx" / "wheels"


def mpi_version() -> str:
    """The MPI library the wheel links against (first line of ``mpirun --version``)."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return "none"
    proc = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    return (proc.stdout or proc.stderr).strip().splitlines()[0] if (proc.stdout or proc.stderr) else "unknown"


def wheel_key(torch_pin: str) -> str:
    """16 hex chars naming one build: what it was built from and with."""
    blob = json.dumps(
        {
            "horovod": HOROVOD_VERSION,
            "torch": torch_pin,
            "mpi": mpi_version(),
            "python": f"{sys.implementation.cache_tag} {sys.version.split()[0]}",
            "patch": PATCH,
            "files": PATCHED_FILES,
            "flags": BUILD_FLAGS,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def missing_tools() -> list[str]:
    """The toolchain pieces that are not on PATH, each with the Debian package that provides it."""
    return [f"{tool} ({pkg})" for tool, pkg in TOOLS.items() if shutil.which(tool) is None]


def ensure_wheel(
    torch_pin: str,
    build_python: Callable[[], Path],
    cache: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The Horovod wheel for ``torch_pin``: ``$PHALANX_HOROVOD_WHEEL``, the cached build, or a new one.

    ``build_python`` returns an interpreter whose venv holds that torch and BUILD_PACKAGES (called only
    when a build is needed). Raises UsageError when the toolchain is missing or the build fails.
    """
    say = progress or log.info
    given = knobs.HOROVOD_WHEEL.value()
    if given:
        path = given
        if not path.is_file() or path.suffix != ".whl":
            raise UsageError(f"PHALANX_HOROVOD_WHEEL={given!r} is not a wheel file; unset it to build one")
        return path
    cache = cache or wheels_dir()
    key = wheel_key(torch_pin)
    folder = cache / f"horovod-{key}"
    found = sorted(folder.glob("horovod-*.whl"))
    if found:
        say(f"Horovod {HOROVOD_VERSION} for torch {torch_pin}: the cached build {found[0]}")
        return found[0]
    missing = missing_tools()
    if missing:
        raise UsageError(
            "framework horovod: Horovod must be built from source and the toolchain is missing: "
            f"{', '.join(missing)}. Install it (apt-get install -y cmake g++ openmpi-bin libopenmpi-dev) "
            "or point PHALANX_HOROVOD_WHEEL at a prebuilt wheel"
        )
    cache.mkdir(parents=True, exist_ok=True)

    with open(cache / f".horovod-{key}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = sorted(folder.glob("horovod-*.whl"))
            if found:
                return found[0]
            _sweep(cache, key)
            return _build(key, torch_pin, folder, build_python(), say)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _sweep(cache: Path, key: str) -> None:
    """Remove what killed builds of ``key`` left (their work folders, ~180 MB each); the caller
    holds the key's lock, so no build of it is running."""
    for left in cache.glob(f".horovod-{key}-*"):
        if left.is_dir():
            shutil.rmtree(left, ignore_errors=True)


def _build(key: str, torch_pin: str, folder: Path, python: Path, say: Callable[[str], None]) -> Path:
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".horovod-{key}-", dir=folder.parent))
    logfile = work / "build.log"
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(BUILD_FLAGS)
        env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
        env.setdefault("MAKEFLAGS", f"-j{os.cpu_count() or 1}")
        say(
            f"building Horovod {HOROVOD_VERSION} for torch {torch_pin} once (about 4 min on 2 idle cores) ..."
        )
        pip = [str(python), "-P", "-m", "pip"]  # -P, and its own folder: no user's pip.py on its path
        sdist_argv = [*pip, "download", "--no-deps", "--no-binary", ":all:", f"horovod=={HOROVOD_VERSION}"]
        _run([*sdist_argv, "-d", str(work)], env, logfile, "downloading the sdist", cwd=work)
        sdist = next(work.glob("horovod-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        src = work / f"horovod-{HOROVOD_VERSION}"
        for name in PATCHED_FILES:
            path = src / name
            text = path.read_text()
            if PATCH[0] not in text:
                raise UsageError(f"Horovod's {name} no longer says {PATCH[0]!r}: the C++17 fix cannot apply")
            path.write_text(text.replace(*PATCH))
        out = work / "wheel"
        done = threading.Event()
        ticker = threading.Thread(target=_tick, args=(done, started, logfile, say), daemon=True)
        ticker.start()
        try:
            wheel_argv = [*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", str(out), str(src)]
            _run(wheel_argv, env, logfile, "building the wheel", cwd=src)
        finally:
            done.set()
        wheel = next(out.glob("horovod-*.whl"))
        staged = work / "publish"
        staged.mkdir()
        shutil.move(str(wheel), staged / wheel.name)
        shutil.copy(logfile, staged / "build.log")
        os.replace(staged, folder)  # atomic publish
        say(f"Horovod built in {time.monotonic() - started:.0f} s; cached in {folder}")
        return folder / wheel.name
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _tick(done: threading.Event, started: float, logfile: Path, say: Callable[[str], None]) -> None:
    while not done.wait(PROGRESS_SECONDS):
        try:
            last = logfile.read_text(errors="replace").strip().splitlines()[-1][:100]
        except (OSError, IndexError):
            last = ""
        say(f"still building Horovod ({time.monotonic() - started:.0f} s): {last}")


def _run(argv: list[str], env: dict[str, str], logfile: Path, what: str, cwd: Path | None = None) -> None:
    with open(logfile, "ab") as out:
        code = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd).returncode
    if code != 0:
        tail = logfile.read_text(errors="replace").splitlines()[-20:]
        raise UsageError(
            f"building Horovod failed at {what} (exit status {code}); nothing was kept.\n"
            + "\n".join(f"  | {line}" for line in tail)
        )


def torch_pin_of(packages: tuple[str, ...] | list[str]) -> str | None:
    """The exact torch version an experiment names in build.pip_packages, if any."""
    for entry in packages:
        m = re.fullmatch(r"\s*torch\s*===?\s*(\S+)\s*", entry, re.I)
        if m:
            return m.group(1)
    return None


def expected_wheel(torch_pin: str, cache: Path | None = None) -> Path:
    """Where the wheel is or will be (a dry run names it without building)."""
    given = knobs.HOROVOD_WHEEL.value()
    if given:
        return given
    folder = (cache or wheels_dir()) / f"horovod-{wheel_key(torch_pin)}"
    found = sorted(folder.glob("horovod-*.whl"))
    return found[0] if found else folder / f"horovod-{HOROVOD_VERSION}.whl"
