"""Per-experiment Python environments: `build.pip_packages` / `build.requirements` -> a cached venv.

TensorFlow and MXNet pin numpy and protobuf versions that clash with each other and with Phalanx's own
environment, so an experiment that names packages runs in its own venv. Venvs are expensive (40 s and
1.6 GB for TensorFlow), so each is keyed by the hash of what it holds (the interpreter, the sorted
packages, the requirements file's content, the build steps) and reused by every experiment that asks
for the same thing.

Publishing is atomic: a venv is built in `<venvs_dir>/.build-<hash>-<random>` and becomes visible only
when the symlink `<venvs_dir>/<hash>` is renamed into place. (A venv cannot itself be renamed: pip
writes its absolute path into every script's shebang, so the build folder keeps its name and the
symlink is what appears atomically.) Builders of the same hash serialise on an `fcntl.flock`, so two
experiments started together build the environment once; a failed or killed build leaves no `<hash>`
behind, and its folder is swept by the next builder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from phalanx import knobs
from phalanx.buildprogress import BuildProgress
from phalanx.errors import NotFound, UsageError
from phalanx.machine import box as boxes
from phalanx.machine.box import Isolation
from phalanx.machine.handoff import TRUSTED_PATH, handed
from phalanx.spec.model import REQUIREMENTS_MAX_BYTES, Build

log = logging.getLogger(__name__)

MANIFEST = "phalanx-env.json"  # what the venv holds, written inside it before it is published
BUILD_LOG = "phalanx-build.log"  # pip's output, kept inside the venv
# This machine's default torch: the CPU wheel its package sources hold. Any other exact pin the user
# names (another version, a CUDA build such as 2.13.0+cu126 from an --extra-index-url) is accepted;
# only an unpinned or ranged torch is refused, because pip would resolve it to the newest multi-GB
# CUDA build.


def torch_pin() -> str:
    """The torch version estimators pin (PHALANX_DEFAULT_TORCH, default 2.13.0)."""
    return knobs.DEFAULT_TORCH.value()


# pip options an entry of build.pip_packages may carry: where packages come from, nothing else
PIP_SOURCE_OPTIONS = ("--extra-index-url", "--index-url", "--find-links", "--pre")
TAIL_LINES = 25
LOOK_SECONDS = 1.0  # how often a step's new output (or a lock's release) is looked for, with ``progress``

# ==2.13.0, ==2.13.0+cu126, ===2.13.0+cpu: one exact version, with or without a local build label
_EXACT_PIN = re.compile(r"===?[0-9][0-9A-Za-z.!]*(\+[0-9A-Za-z.]+)?")
_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?\s*(.*)$")
# Packages that drag in torch when torch itself is not pinned next to them.
_TORCH_FAMILY = frozenset({"torchvision", "torchaudio", "torchtext", "torchdata"})


@dataclass(frozen=True)
class EnvInfo:
    """One cached environment, as `list_envs` reports it."""

    hash: str
    path: Path
    python: Path
    packages: tuple[str, ...]
    requirements: str | None
    created: float


def wants_env(build: Build) -> bool:
    """True when the experiment asks for its own environment (else it runs in Phalanx's)."""
    return bool(build.pip_packages or build.requirements or build.build_steps)


def env_hash(build: Build, workdir: str | Path, box: Isolation | None = None) -> str:
    """The key of the venv `build` describes: 16 hex chars of a sha256 over everything it holds.

    Raises UsageError when the requirements file cannot be read or torch is not pinned.
    """
    return _hash_of(_contents(build, Path(workdir), box))


def ensure_env(
    build: Build,
    workdir: str | Path,
    venvs_dir: Path,
    box: Isolation | None = None,
    progress: BuildProgress | None = None,
) -> Path:
    """Return the python of the venv `build` describes, building it on first use.

    With nothing to install, the interpreter running Phalanx is returned. Concurrent callers for
    the same environment wait for one build; a failed pip install raises UsageError with pip's last
    lines and publishes nothing. ``box``: build it in a box as that project's account (pip runs
    the packages' own build code), the build's log kept outside what the box may write.
    ``progress``: told each step and pip's lines as they come (the experiment's console).
    """
    if not wants_env(build):
        return Path(sys.executable)
    workdir = Path(workdir)
    contents = _contents(build, workdir, box)
    key = _hash_of(contents)
    venvs_dir = Path(venvs_dir)
    final = venvs_dir / key
    python = final / "bin" / "python"
    if python.exists():
        return python
    venvs_dir.mkdir(parents=True, exist_ok=True)
    with _locked(venvs_dir / f".{key}.lock", key, progress):
        if python.exists():  # built by the process we waited for
            return python
        _sweep(venvs_dir, key)
        _build(build, workdir, contents, key, venvs_dir, box, progress)
    return python


def list_envs(venvs_dir: Path) -> list[EnvInfo]:
    """Every published environment under `venvs_dir`, newest first."""
    found: list[EnvInfo] = []
    if not Path(venvs_dir).is_dir():
        return found
    for link in Path(venvs_dir).iterdir():
        if link.name.startswith(".") or not (link / "bin" / "python").exists():
            continue
        try:
            manifest = json.loads((link / MANIFEST).read_text())
        except (OSError, ValueError):
            manifest = {}
        found.append(
            EnvInfo(
                hash=link.name,
                path=link,
                python=link / "bin" / "python",
                packages=tuple(manifest.get("packages", ())),
                requirements=manifest.get("requirements_file"),
                created=float(manifest.get("created", 0.0)),
            )
        )
    return sorted(found, key=lambda e: e.created, reverse=True)


def remove_env(venvs_dir: Path, key: str) -> Path:
    """Delete the environment whose hash is (or starts with) `key`; returns the path it had.

    Takes the build lock, so it never removes an environment while it is being built. An experiment
    already running in it keeps its open files, but its next import may fail: remove idle ones.
    """
    venvs_dir = Path(venvs_dir)
    matches = [e for e in list_envs(venvs_dir) if e.hash.startswith(key)] if key else []
    if not matches:
        raise NotFound(f"no environment {key!r} under {venvs_dir}")
    if len(matches) > 1:
        raise UsageError(f"{key!r} matches {len(matches)} environments; give more characters of the hash")
    env = matches[0]
    with _locked(venvs_dir / f".{env.hash}.lock", env.hash):
        target = env.path.resolve()
        env.path.unlink(missing_ok=True)
        shutil.rmtree(target, ignore_errors=True)
    return env.path


# --- what an environment holds ------------------------------------------------------------------


def _contents(build: Build, workdir: Path, box: Isolation | None = None) -> dict[str, object]:
    entries = [p.strip() for p in build.pip_packages if p.strip()]
    for p in entries:
        if p.startswith("-") and not p.startswith(PIP_SOURCE_OPTIONS):
            raise UsageError(
                f"build.pip_packages: {p!r} is a pip option, not a package; only "
                f"{', '.join(PIP_SOURCE_OPTIONS)} may stand there, put other options in a "
                "requirements file (build.requirements)"
            )
    packages = [p for p in entries if not p.startswith("-")]
    requirements_text: str | None = None
    if build.requirements:
        path = workdir / build.requirements
        try:  # a box's folder is read without following its links
            data = (
                boxes.read_file(path, REQUIREMENTS_MAX_BYTES)
                if box is None
                else boxes.read_inside(workdir, _inside(path, workdir), REQUIREMENTS_MAX_BYTES)
            )
            requirements_text = data.decode()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(
                f"build.requirements: cannot read {path} ({getattr(exc, 'strerror', None) or exc}); "
                "the path is relative to the experiment file's directory"
            ) from None
    _check_torch_pinned(packages, requirements_text, build.requirements)
    options = [p for p in entries if p.startswith("-")]
    return {
        "python": _interpreter_id(),
        "packages": sorted(packages),
        # only when there are some, so environments cached before options were allowed keep their hash
        **({"pip_options": options} if options else {}),
        "requirements": requirements_text,
        "requirements_file": build.requirements,
        "build_steps": list(build.build_steps),
        "env_vars": dict(sorted(build.env_vars.items())),
    }


def _inside(path: Path, folder: Path) -> str:
    """``path`` relative to ``folder`` (OSError when it lies outside: a box reads only its own)."""
    try:
        return str(path.relative_to(folder))
    except ValueError:
        raise OSError(f"not inside the experiment's folder {folder}") from None


def _hash_of(contents: Mapping[str, object]) -> str:
    keyed = {k: v for k, v in contents.items() if k != "requirements_file"}  # its content counts
    blob = json.dumps(keyed, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _interpreter_id() -> str:
    """The interpreter a venv is made from: its version, build and real location."""
    base = getattr(sys, "_base_executable", sys.executable)
    return f"{sys.implementation.cache_tag} {sys.version} {platform.machine()} {os.path.realpath(base)}"


def _requirement_lines(text: str) -> Iterator[str]:
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            yield line


def _check_torch_pinned(packages: list[str], requirements: str | None, req_file: str | None) -> None:
    """Refuse a torch that pip would resolve to a multi-GB CUDA build instead of the local CPU wheel."""
    sources = [(p, "build.pip_packages") for p in packages]
    if requirements:
        sources += [(line, f"build.requirements ({req_file})") for line in _requirement_lines(requirements)]
    pinned = False
    family: list[tuple[str, str]] = []
    for entry, where in sources:
        m = _NAME.match(entry)
        if not m:
            continue
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        spec = m.group(3).split(";", 1)[0].replace(" ", "")
        if name == "torch":
            if not _EXACT_PIN.fullmatch(spec):
                raise UsageError(
                    f"{where}: {entry!r} must be pinned exactly: write 'torch=={torch_pin()}' (the "
                    "CPU build this machine has) or the build you want, e.g. 'torch==2.13.0+cu126' "
                    "with '--extra-index-url https://download.pytorch.org/whl/cu126' "
                    "(an unpinned or ranged torch makes pip download the newest multi-GB CUDA build)"
                )
            pinned = True
        elif name in _TORCH_FAMILY:
            family.append((entry, where))
    if family and not pinned:
        entry, where = family[0]
        raise UsageError(
            f"{where}: {entry!r} pulls in torch; add 'torch=={torch_pin()}' next to it "
            "or the exact build you want (otherwise pip downloads a multi-GB CUDA build of the newest torch)"
        )


# --- building -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(lock_path: Path, key: str, progress: BuildProgress | None = None) -> Iterator[None]:
    """Hold the build lock of environment ``key``; while another process holds it, wait (telling
    ``progress``, with its heartbeat, that this experiment waits for that build)."""
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("environment %s is being built by another process; waiting for it", key)
            if progress is None:
                fcntl.flock(handle, fcntl.LOCK_EX)
            else:
                progress.step(f"waiting for another experiment's build of environment {key}")
                while not _try_lock(handle):
                    progress.tick()
                    time.sleep(LOOK_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _sweep(venvs_dir: Path, key: str) -> None:
    """Remove what a killed build of `key` left (we hold its lock, so nobody is using it)."""
    for stale in venvs_dir.glob(f".build-{key}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    link = venvs_dir / key
    if link.is_symlink() and not link.exists():  # dangling: its target was removed
        link.unlink()


def _build(
    build: Build,
    workdir: Path,
    contents: dict[str, object],
    key: str,
    venvs_dir: Path,
    box: Isolation | None,
    progress: BuildProgress | None = None,
) -> None:
    started = time.monotonic()
    what = ", ".join([*build.pip_packages, *([f"-r {build.requirements}"] if build.requirements else [])])
    log.info("building environment %s (%s) ...", key, what or "build steps")
    if progress is not None:
        progress.note(f"building environment {key}: {what or 'build steps'}")
    target = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=venvs_dir))
    # a boxed build's log stays where only root writes while the box runs (a box could plant a link)
    logfile = target / BUILD_LOG if box is None else venvs_dir / f"{target.name}.log"
    scratch: Path | None = None
    try:
        env = _build_environ(target, build.env_vars, box)
        run = _Steps(workdir, env, logfile, progress)
        if box is not None:
            scratch = boxes.make_own_folder(venvs_dir / f"{target.name}.scratch", box)
            os.chmod(boxes.make_own_folder(target, box), 0o755)
            run = _Steps(
                workdir,
                {**env, "HOME": str(scratch)},
                logfile,
                progress,
                build_box(box, target, workdir, scratch),
                (box.uid, box.gid),
            )
        # -P: the folder the steps run in (the experiment's) is never on the interpreter's path, so
        # a venv.py or pip.py of the user's is not what runs (as root, for the Horovod tools' build)
        run([sys.executable, "-P", "-m", "venv", str(target)], "creating the venv")
        pip = [str(target / "bin" / "python"), "-P", "-m", "pip", "install", "--no-input"]
        if build.pip_packages:
            args = [a for p in build.pip_packages if p.strip() for a in shlex.split(p)]
            run([*pip, *args], "pip install of build.pip_packages")
        if build.requirements:
            run([*pip, "-r", str(workdir / build.requirements)], "build.requirements")
        for i, command in enumerate(build.build_steps):
            run(["/bin/sh", "-c", command], f"build.build_steps[{i}] ({command!r})")
        manifest = {**contents, "hash": key, "created": time.time(), "path": str(target)}
        boxes.write_new(target / MANIFEST, json.dumps(manifest, indent=2).encode())
        if box is not None:  # the box has ended: nothing of it runs that could swap a file now
            boxes.write_new(target / BUILD_LOG, logfile.read_bytes())
            logfile.unlink()
        tmp_link = venvs_dir / f".link-{key}-{os.getpid()}"
        tmp_link.unlink(missing_ok=True)
        tmp_link.symlink_to(target.name)
        os.replace(tmp_link, venvs_dir / key)  # the atomic publish
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        if box is not None:
            logfile.unlink(missing_ok=True)
        raise
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)  # fd-based: never follows the box's links
    log.info("environment %s ready in %.0f s", key, time.monotonic() - started)


def build_box(box: Isolation, target: Path, workdir: Path, scratch: Path) -> list[str]:
    """The box a build runs in: the venv being built and a scratch folder writable, the
    experiment's folder, local package sources (PIP_FIND_LINKS), the wheels this machine built
    (``_machine_wheels``) and pip's configuration read-only."""
    links = [p for p in os.environ.get("PIP_FIND_LINKS", "").split() if p.startswith("/")]
    layout = boxes.Layout(
        cwd=str(workdir),
        tmp=str(scratch),
        rw=(str(target), str(scratch)),
        ro=(str(workdir), *boxes.interpreter_trees(), *links, *_machine_wheels(), *_pip_config()),
    )
    return boxes.box_argv(box, layout)


def _machine_wheels() -> list[str]:
    """The wheels Phalanx built on this machine (its wheels folder) and the one an admin named
    (PHALANX_HOROVOD_WHEEL): framework: horovod installs one of them by its path."""
    from phalanx import horovod  # why: a boxed build only: a local run's build binds no wheels

    given = knobs.HOROVOD_WHEEL.value()
    paths = [str(horovod.wheels_dir()), *([str(given)] if given else [])]
    return [p for p in paths if os.path.exists(p)]  # bubblewrap refuses to bind a missing path


def _pip_config() -> list[str]:
    """The server account's own pip configuration (where this machine's packages come from): the
    box has another home, so it is bound and named by PIP_CONFIG_FILE (_pip_settings)."""
    named = os.environ.get("PIP_CONFIG_FILE")
    found = (
        [Path(named)]
        if named
        else [Path.home() / ".config" / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf"]
    )
    return [str(p) for p in found if p.is_file()][:1]


def _build_environ(target: Path, extra: Mapping[str, str], box: Isolation | None = None) -> dict[str, str]:
    """The outer venv and PYTHONPATH must not leak into the new one; the venv's bin comes first.
    A boxed build gets none of the server's environment: the box's own, plus pip's settings."""
    if box is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    else:
        env = {**boxes.box_env(box, "/tmp"), **boxes.inherited(), **_pip_settings()}
    env.update(extra)
    env["VIRTUAL_ENV"] = str(target)
    env["PATH"] = f"{target / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _pip_settings() -> dict[str, str]:
    """pip's own settings from the server's environment (where packages come from, timeouts): the
    machine's package sources are the boxed build's too; nothing else of that environment is."""
    settings = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k.lower() in _PROXIES}
    config = _pip_config()
    if config:
        settings["PIP_CONFIG_FILE"] = config[0]
    return settings


_PROXIES = ("http_proxy", "https_proxy", "no_proxy")


@dataclass(frozen=True)
class _Steps:
    """Runs the build's steps in ``cwd`` with ``env``, output to ``logfile`` (and, as it comes, to
    ``progress``), each inside ``box`` (an argv prefix; empty: as this process) as the account
    ``owner`` (uid, gid), which alone is handed ``env`` (phalanx.machine.handoff): the build's
    ``env_vars`` never reach bubblewrap or setpriv, which run as root."""

    cwd: Path
    env: Mapping[str, str]
    logfile: Path
    progress: BuildProgress | None = None
    box: tuple[str, ...] | list[str] = ()
    owner: tuple[int, int] = (0, 0)

    def __call__(self, argv: list[str], what: str) -> None:
        if not self.box:
            _step(argv, argv, self.cwd, self.env, self.logfile, what, self.progress)
            return
        try:
            program, held = handed(argv, self.env, *self.owner)
        except ValueError as exc:
            raise UsageError(f"build.env_vars: {exc}") from None
        with held:
            started = [*self.box, *program]
            _step(started, argv, self.cwd, {"PATH": TRUSTED_PATH}, self.logfile, what, self.progress, held)


def _step(
    argv: list[str],
    shown: list[str],
    cwd: Path,
    env: Mapping[str, str],
    logfile: Path,
    what: str,
    progress: BuildProgress | None = None,
    held: IO[bytes] | None = None,
) -> None:
    """``argv`` run to its end (its box's prefix and hand-over included), logged as ``shown`` (what
    it runs: the box's bind mounts would hide pip's error in the tail a failure shows);
    ``held``: the file its box's shell reads its environment from."""
    if progress is not None:
        progress.step(what)
    with open(logfile, "ab") as out:
        out.write(f"$ {' '.join(shown)}\n".encode())
        out.flush()
        seen = out.tell()  # pip's own lines start here
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=held,  # its environment, read first (phalanx.machine.handoff)
            )
        except OSError as exc:
            raise UsageError(f"building the environment: {what} could not start: {exc}") from None
        try:
            code = _wait(proc, logfile, seen, progress)
        except BaseException:  # Ctrl-C or SIGTERM: pip must not write on after we remove its folder
            proc.kill()
            proc.wait()
            raise
    if code != 0:
        tail = logfile.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        raise UsageError(
            f"building the environment failed at {what} (exit status {code}); nothing was kept.\n"
            + "\n".join(f"  | {line}" for line in tail)
            + "\nFix the package names or versions in the experiment file's build section and run again."
        )


def _wait(proc: subprocess.Popen[bytes], logfile: Path, seen: int, progress: BuildProgress | None) -> int:
    """The step's exit status, passing on its output from byte ``seen`` of ``logfile`` as it comes
    (whole lines; the rest at its end) and a heartbeat while it is silent."""
    if progress is None:
        return proc.wait()
    while True:
        try:
            code: int | None = proc.wait(timeout=LOOK_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        with open(logfile, "rb") as log_file:
            log_file.seek(seen)
            new = log_file.read()
        whole = new if code is not None else new[: new.rfind(b"\n") + 1]
        seen += len(whole)
        if whole:
            progress.output(whole.decode(errors="replace"))
        if code is not None:
            return code
        if not whole:
            progress.tick()
