"""Per-experiment venvs: built once per content hash, published atomically, refused when torch would
turn into a multi-GB download. Everything installs a tiny wheel written here, with PIP_NO_INDEX set,
so no test touches the network."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from phalanx.buildenv import (
    MANIFEST,
    EnvInfo,
    ensure_env,
    env_hash,
    list_envs,
    remove_env,
    wants_env,
)
from phalanx.errors import NotFound, UsageError
from phalanx.spec.model import Build

OFFLINE = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}


def write_wheel(folder: Path, name: str = "tinypkg", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel, by hand: building one would need setuptools from an index."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def tiny_build(wheel: Path, **kw: object) -> Build:
    return Build(pip_packages=(str(wheel),), env_vars={**OFFLINE, **kw.pop("env_vars", {})}, **kw)  # type: ignore[arg-type]


def run_python(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Build, Path, Path, Path]:
    """One environment shared by the tests that only read it: (build, workdir, venvs_dir, python)."""
    root = tmp_path_factory.mktemp("buildenv")
    wheel = write_wheel(root / "wheels")
    build = tiny_build(wheel)
    venvs = root / "venvs"
    return build, root, venvs, ensure_env(build, root, venvs)


def test_an_experiment_without_packages_runs_in_phalanx_interpreter(tmp_path: Path) -> None:
    assert not wants_env(Build())
    assert ensure_env(Build(), tmp_path, tmp_path / "venvs") == Path(sys.executable)
    assert not (tmp_path / "venvs").exists()


def test_the_venv_holds_the_packages_and_nothing_of_phalanx_own_environment(
    built: tuple[Build, Path, Path, Path],
) -> None:
    _, _, venvs, python = built
    assert python.parent.parent.parent == venvs
    ok = run_python(python, "import tinypkg, sys; print(tinypkg.VERSION, sys.prefix)")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split()[0] == "1.0"
    isolated = run_python(python, "import typer")  # in Phalanx's venv, not in the experiment's
    assert isolated.returncode != 0 and "No module named 'typer'" in isolated.stderr


def test_the_same_build_reuses_the_cached_venv(built: tuple[Build, Path, Path, Path]) -> None:
    build, workdir, venvs, python = built
    before = (python.parent.parent / MANIFEST).read_text()
    reordered = Build(pip_packages=tuple(reversed(build.pip_packages)), env_vars=build.env_vars)
    assert ensure_env(reordered, workdir, venvs) == python
    assert (python.parent.parent / MANIFEST).read_text() == before
    assert len([p for p in venvs.iterdir() if p.name.startswith(".build-")]) == 1  # the one published


def test_list_envs_reports_what_each_venv_holds(built: tuple[Build, Path, Path, Path]) -> None:
    build, workdir, venvs, python = built
    (info,) = list_envs(venvs)
    assert isinstance(info, EnvInfo)
    assert info.hash == env_hash(build, workdir)
    assert info.python == python
    assert info.packages == build.pip_packages


def test_hash_follows_the_packages_and_the_requirements_content(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("numpy==2.4.6\n")
    a = env_hash(Build(pip_packages=("six==1.17.0", "attrs==25.1.0")), tmp_path)
    assert a == env_hash(Build(pip_packages=("attrs==25.1.0", "six==1.17.0")), tmp_path)
    assert a != env_hash(Build(pip_packages=("six==1.16.0", "attrs==25.1.0")), tmp_path)
    with_req = env_hash(Build(requirements="requirements.txt"), tmp_path)
    req.write_text("numpy==2.4.5\n")
    assert env_hash(Build(requirements="requirements.txt"), tmp_path) != with_req
    assert len(a) == 16 and int(a, 16) >= 0


def test_a_failed_install_raises_with_pip_lines_and_leaves_nothing(tmp_path: Path) -> None:
    venvs = tmp_path / "venvs"
    build = Build(pip_packages=("surely-not-a-package-phalanx==0.0.1",), env_vars=OFFLINE)
    with pytest.raises(UsageError) as err:
        ensure_env(build, tmp_path, venvs)
    message = str(err.value)
    assert "pip install" in message
    assert "No matching distribution found for surely-not-a-package-phalanx" in message  # pip's words
    assert "nothing was kept" in message
    assert [p.name for p in venvs.iterdir() if not p.name.endswith(".lock")] == []
    assert list_envs(venvs) == []


def test_a_failed_build_step_names_the_step(tmp_path: Path) -> None:
    # build steps alone (no package to install first): the venv is made, the step fails, none is kept
    build = Build(build_steps=("echo about to fail; exit 3",), env_vars=OFFLINE)
    with pytest.raises(UsageError, match=r"build_steps\[0\].*exit status 3") as err:
        ensure_env(build, tmp_path, tmp_path / "venvs")
    assert "about to fail" in str(err.value)
    assert list_envs(tmp_path / "venvs") == []


def test_concurrent_builders_sweep_a_killed_build_build_once_and_remove_env_deletes_the_result(
    tmp_path: Path,
) -> None:
    """One environment's life, one build (a venv costs seconds of pip): what a SIGKILLed builder
    left is swept, three builders at once build it once, and remove_env deletes it."""
    wheel = write_wheel(tmp_path / "wheels")
    counter = tmp_path / "builds.txt"
    venvs = tmp_path / "venvs"
    # the builders' Build is this one plus a step that counts the builds: its key is theirs
    counted = tiny_build(wheel, build_steps=(f"echo built >> {counter}",))
    key = env_hash(counted, tmp_path)
    stale = venvs / f".build-{key}-killed"
    (stale / "bin").mkdir(parents=True)  # what a SIGKILLed builder leaves: a folder, no published link
    script = (
        "import sys; from pathlib import Path; from phalanx.buildenv import ensure_env;"
        "from phalanx.spec.model import Build;"
        f"b = Build(pip_packages=({str(wheel)!r},), build_steps=('echo built >> {counter}',),"
        f" env_vars={OFFLINE!r});"
        f"print(ensure_env(b, {str(tmp_path)!r}, Path({str(venvs)!r})))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(3)
    ]
    outputs = [p.communicate(timeout=240)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert len(set(outputs)) == 1
    assert counter.read_text().splitlines() == ["built"]
    # the killed build's folder was swept, and the environment rebuilt in its place works
    python = ensure_env(counted, tmp_path, venvs)
    assert str(python) == outputs[0]
    assert run_python(python, "import tinypkg").returncode == 0
    assert not stale.exists()
    assert counter.read_text().splitlines() == ["built"]  # (ensure_env here found it built)
    # remove_env by a prefix of its key: the link, the venv's folder and its python go
    folder = python.parent.parent.resolve()
    removed = remove_env(venvs, key[:6])
    assert removed == venvs / key
    assert not folder.exists() and not python.exists()
    assert list_envs(venvs) == []
    with pytest.raises(NotFound):
        remove_env(venvs, "abc")


@pytest.mark.parametrize(
    "packages",
    [("torch",), ("torch>=2.0",), ("torch==2.*",), ("numpy", "torch~=2.13.0"), ("torchvision",)],
)
def test_torch_must_be_pinned_exactly_and_the_message_names_the_local_cpu_build(
    tmp_path: Path, packages: tuple[str, ...]
) -> None:
    with pytest.raises(UsageError, match=r"torch==2\.13\.0"):
        ensure_env(Build(pip_packages=packages), tmp_path, tmp_path / "venvs")
    assert not (tmp_path / "venvs").exists()


def test_an_unpinned_torch_in_the_requirements_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("# deps\nnumpy\ntorch  # the model\n")
    with pytest.raises(UsageError, match=r"build.requirements \(requirements.txt\).*torch==2\.13\.0"):
        env_hash(Build(requirements="requirements.txt"), tmp_path)


@pytest.mark.parametrize(
    "packages", [("torch==2.13.0",), ("torch == 2.13.0", "torchvision"), ("Torch==2.13.0",)]
)
def test_torch_pinned_to_2_13_0_is_accepted(tmp_path: Path, packages: tuple[str, ...]) -> None:
    assert len(env_hash(Build(pip_packages=packages), tmp_path)) == 16


def test_a_missing_requirements_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"build.requirements: cannot read .*nope.txt"):
        ensure_env(Build(requirements="nope.txt"), tmp_path, tmp_path / "venvs")


def test_pip_options_in_pip_packages_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="pip option"):
        env_hash(Build(pip_packages=("--no-deps",)), tmp_path)


@pytest.mark.parametrize(
    "packages",
    [
        ("torch==2.13.0+cu126", "--extra-index-url https://download.pytorch.org/whl/cu126"),
        ("torch==2.12.1",),
        ("torch===2.13.0+cpu", "torchvision==0.28.0"),
        ("--index-url=https://download.pytorch.org/whl/cu126", "torch==2.13.0+cu126"),
    ],
)
def test_any_exactly_pinned_torch_build_is_accepted_with_its_package_source(
    tmp_path: Path, packages: tuple[str, ...]
) -> None:
    """A GPU partition needs a CUDA build: the local CPU pin is only this machine's default."""
    assert len(env_hash(Build(pip_packages=packages), tmp_path)) == 16


def test_a_package_source_is_part_of_the_environment_hash(tmp_path: Path) -> None:
    plain = env_hash(Build(pip_packages=("torch==2.13.0+cu126",)), tmp_path)
    sourced = env_hash(
        Build(pip_packages=("torch==2.13.0+cu126", "--extra-index-url https://x/cu126")), tmp_path
    )
    assert plain != sourced


def test_a_venv_py_or_pip_py_in_the_folder_is_not_what_builds_the_venv(tmp_path: Path) -> None:
    """The build's steps run in the experiment's folder, and root builds the Horovod tools' venv on a
    server: `python -m venv` and `python -m pip` must not import a venv.py or pip.py found there."""
    marks = tmp_path / "imported-by"
    for name in ("venv", "pip", "ensurepip"):
        (tmp_path / f"{name}.py").write_text(
            f"with open({str(marks)!r}, 'a') as out:\n    out.write({name!r} + '\\n')\nraise SystemExit(9)\n"
        )
    wheel = write_wheel(tmp_path / "wheels")
    python = ensure_env(tiny_build(wheel), tmp_path, tmp_path / "venvs")
    assert not marks.exists(), marks.read_text()
    assert run_python(python, "import tinypkg; print(tinypkg.VERSION)").stdout.strip() == "1.0"
