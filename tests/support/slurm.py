"""A real two-node Slurm cluster (n1, n2) on this machine for tests, around ``scripts/slurm-local``.

The session fixture ``slurm_cluster`` starts munged, slurmctld and two slurmd in a private folder
under /tmp (munge must traverse it, so not pytest's 0700 tmp), installs slurm-wlm and munge from
Debian's packages when missing, and stops every daemon at the end. A test is skipped only when the
packages cannot be installed; a cluster that fails to start fails the test, with its logs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from phalanx.clusters import Cluster

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-local"


def _script() -> Path:
    """scripts/slurm-local of the checkout Phalanx runs from (or of the current folder)."""
    for candidate in (SCRIPT, Path.cwd() / "scripts" / "slurm-local"):
        if candidate.exists():
            return candidate
    raise RuntimeError("scripts/slurm-local not found: run the tests from a Phalanx source checkout")


@dataclass(frozen=True)
class LocalSlurm:
    """A running local cluster: its folder, its slurm.conf and the name it is registered under."""

    dir: Path
    conf: Path
    name: str = "slurm-test"

    def cluster(self, shared_dir: str | None = None) -> Cluster:
        """The cluster as `phalanx cluster add` registers it; its shared folder defaults to
        <dir>/shared, whose venvs folder links to the machine's test venv cache (TensorFlow's and
        MXNet's venvs are built once per machine, not once per session)."""
        if shared_dir is None:
            shared = self.dir / "shared"
            shared.mkdir(exist_ok=True)
            venvs = shared / "venvs"
            if not venvs.exists():
                cache = Path(
                    os.environ.get("PHALANX_TEST_VENVS", Path.home() / ".cache" / "phalanx" / "venvs")
                )
                cache.mkdir(parents=True, exist_ok=True)
                venvs.symlink_to(cache, target_is_directory=True)
            shared_dir = str(shared)
        return Cluster(
            name=self.name, kind="slurm", partition="debug", slurm_conf=str(self.conf), shared_dir=shared_dir
        )

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def squeue(self) -> list[str]:
        """Job ids Slurm still holds (pending, running or completing)."""
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i %T"], env=self.env(), capture_output=True, text=True, check=True
        ).stdout
        return [line for line in out.splitlines() if line.strip()]

    def wait_queue_empty(self, timeout: float = 60.0) -> list[str]:
        deadline = time.monotonic() + timeout
        jobs = self.squeue()
        while jobs and time.monotonic() < deadline:
            time.sleep(0.5)
            jobs = self.squeue()
        return jobs


class SlurmNotInstallable(Exception):
    """slurm-wlm or munge is missing and cannot be installed here (not root, no package source)."""


def _run_script(action: str, folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PHALANX_SLURM_DIR": str(folder), "PHALANX_SLURM_NO_REGISTER": "1"}
    return subprocess.run(
        ["bash", str(_script()), action], env=env, capture_output=True, text=True, timeout=600
    )


def start_local_slurm(folder: Path | None = None) -> LocalSlurm:
    """Start the cluster (idempotent); SlurmNotInstallable when its packages cannot be had."""
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="phalanx-slurm-", dir="/tmp"))
    folder.chmod(0o755)
    proc = _run_script("up", folder)
    if proc.returncode != 0:
        missing = shutil.which("slurmctld") is None or not Path("/usr/sbin/munged").exists()
        if missing:
            raise SlurmNotInstallable(proc.stderr.strip() or "slurm-wlm/munge missing")
        logs = ""
        for log in sorted((folder / "log").glob("*")) + sorted((folder / "munge").glob("*.log")):
            logs += f"\n--- {log}\n{log.read_text(errors='replace')[-2000:]}"
        raise RuntimeError(f"scripts/slurm-local up failed:\n{proc.stderr}{logs}")
    return LocalSlurm(dir=folder, conf=folder / "slurm.conf")


def stop_local_slurm(slurm: LocalSlurm, remove: bool = True) -> None:
    _run_script("down", slurm.dir)
    if remove:
        shutil.rmtree(slurm.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalSlurm]:
    """The two-node cluster for the whole session (about 2 s to start once installed)."""
    try:
        slurm = start_local_slurm()
    except SlurmNotInstallable as exc:
        pytest.skip(f"Slurm cannot be installed here: {exc}")
    try:
        yield slurm
    finally:
        stop_local_slurm(slurm)
