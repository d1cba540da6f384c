"""`pip install .` into a fresh venv: the base install runs and tracks an experiment on this machine
without the heavy extras (no kubernetes, matplotlib or psycopg), ships no test code, and each command
that needs an extra says which one to install (exit 2, no traceback).

Building the venv takes about a minute, so its dependencies are cached across runs in
``$PHALANX_TEST_VENVS/base-install-<hash of pyproject.toml and requirements.lock>`` (default under
~/.cache/phalanx); Phalanx itself is reinstalled from this checkout on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HEAVY = (
    "kubernetes",
    "kubernetes-validate",
    "matplotlib",
    "psycopg",
    "psycopg-binary",
    "jsonschema",
    "optuna",
    "tensorboard",
    "jupyterlab",
)


def clean_env() -> dict[str, str]:
    """This process's environment without PYTHONPATH (the checkout's src) or any PHALANX_ setting."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "PYTHON"))}


def cache_root() -> Path:
    default = Path.home() / ".cache" / "phalanx" / "venvs"
    path = Path(os.environ.get("PHALANX_TEST_VENVS", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with `pip install .` of this checkout (dependencies cached, Phalanx fresh)."""
    key = hashlib.sha256((REPO / "pyproject.toml").read_bytes() + (REPO / "requirements.lock").read_bytes())
    path = cache_root() / f"base-install-{key.hexdigest()[:12]}"
    pip = [str(path / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    if not (path / ".complete").exists():
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120, env=clean_env())
        # the lock only constrains versions: it adds no package that `pip install .` would not pull
        subprocess.run(
            [*pip, "install", "-c", str(REPO / "requirements.lock"), str(REPO)], check=True, timeout=800
        )
        (path / ".complete").touch()
    else:  # this checkout's Phalanx, not the one the cache was built with
        subprocess.run(
            [*pip, "install", "--no-deps", "--force-reinstall", str(REPO)], check=True, timeout=300
        )
    return path


def phalanx(
    venv: Path, home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "phalanx"), *args],
        env={**clean_env(), "PHALANX_HOME": str(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        cwd=home.parent,
    )


def test_the_base_install_pulls_no_heavy_extra_and_ships_no_test_code(venv: Path) -> None:
    python = str(venv / "bin" / "python")
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(),
    )
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "phalanx" in names
    assert not names & set(HEAVY), names & set(HEAVY)
    where = subprocess.run(
        [python, "-c", "import phalanx, pathlib; print(pathlib.Path(phalanx.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(),
        cwd=venv,
    ).stdout.strip()
    package = Path(where)
    assert package.is_relative_to(venv), package  # the installed copy, not this checkout's src
    assert (package / "machine" / "ports.py").is_file()  # subpackages ship too
    assert not (package / "testing").exists()
    assert not [p for p in package.rglob("*.py") if "import pytest" in p.read_text()]


Tracked = tuple[Path, subprocess.CompletedProcess[str]]  # a home, and the `phalanx run` that filled it


@pytest.fixture(scope="module")
def tracked(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Tracked:
    """One experiment run and tracked by the base install's `phalanx run`: (its home, the run)."""
    base = tmp_path_factory.mktemp("tracked")
    home = base / "home"
    work = base / "exp"
    work.mkdir()
    (work / "train.py").write_text(
        textwrap.dedent(
            """
            import phalanx
            from phalanx import Task
            task = Task.current_task()
            for step in range(5):
                phalanx.log_metrics(step=step, loss=1.0 / (step + 1))
            (out := __import__("pathlib").Path("weights.txt")).write_text("w")
            task.upload_artifact("weights", out)
            """
        )
    )
    (work / "polyaxonfile.yml").write_text(
        "version: 1\nkind: experiment\nname: light\nproject: install\nrun:\n  cmd: python train.py\n"
    )
    return home, phalanx(venv, home, "run", "-f", str(work / "polyaxonfile.yml"))


def test_run_and_tracking_work_in_the_base_install(venv: Path, tracked: Tracked) -> None:
    home, done = tracked
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [exp] = json.loads(phalanx(venv, home, "ls", "-o", "json").stdout)
    assert exp["status"] == "succeeded"
    metrics = json.loads(phalanx(venv, home, "metrics", exp["id"], "-o", "json").stdout)
    assert "loss" in json.dumps(metrics) and "0.2" in json.dumps(metrics)
    artifacts = phalanx(venv, home, "artifacts", exp["id"]).stdout
    assert "weights" in artifacts


@pytest.mark.parametrize(
    ("extra", "args", "env"),
    [
        ("plot", ("plot", "{id}", "-o", "loss.png"), {}),
        ("postgres", ("ls",), {"PHALANX_DB_URL": "postgresql://nobody@127.0.0.1:1/none"}),
        ("kubernetes", ("run", "-f", "{file}", "--cluster", "k8s", "--dry-run"), {}),
        ("search", ("group", "run", "-f", "{group}"), {}),
        ("services", ("tensorboard", "start", "--project", "vision"), {}),
    ],
)
def test_a_command_without_its_extra_names_the_pip_command(
    venv: Path,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    extra: str,
    args: tuple[str, ...],
    env: dict[str, str],
) -> None:
    home = tmp_path / "home"
    spec = tmp_path / "polyaxonfile.yml"
    spec.write_text("version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n")
    exp_id = ""
    if extra == "plot":  # an experiment with a scalar to draw: the one the base install tracked
        home, done = request.getfixturevalue("tracked")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        exp_id = json.loads(phalanx(venv, home, "ls", "-o", "json").stdout)[0]["id"]
    if extra == "kubernetes":
        added = phalanx(
            venv,
            home,
            "cluster",
            "add",
            "k8s",
            "--kind",
            "kubernetes",
            "--server-url",
            "http://phalanx.ml.svc:8000",
        )
        assert added.returncode == 0, added.stderr
    group = tmp_path / "group.yml"
    group.write_text(
        "version: 1\nkind: group\nhptuning:\n  random_search: {n_experiments: 2}\n"
        "  matrix: {lr: {uniform: 0:1}}\nrun:\n  cmd: python -c pass {{ lr }}\n"
    )
    if extra == "search":  # checking a group file needs no extra (no Optuna, no numpy)
        checked = phalanx(venv, home, "check", "-f", str(group))
        assert checked.returncode == 0 and "search: random (2 trials)" in checked.stdout, checked.stderr
    done = phalanx(venv, home, *(a.format(id=exp_id, file=spec, group=group) for a in args), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"pip install 'phalanx[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr
