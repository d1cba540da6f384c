"""Every experiment file of the shared corpus that loads renders for every engine it can run on,
and what is rendered validates: sbatch scripts parse as bash (run by bash in
tests/integration/processes/test_shell_words.py), Kubernetes objects pass the strict
schemas, Kubeflow jobs pass their CRD schema and the operator's rules. A refusal must be a
SpecError that says why (never a crash), and a file's own `backend:` is never refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.backends.base import LaunchContext
from phalanx.backends.kube_objects import validate_core
from phalanx.backends.kubeflow import KubeflowBackend, job_problems
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.backends.slurm import SlurmBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.errors import SpecError
from phalanx.plan import build_plan
from tests.conftest import CORPUS as CORPUS_ROOT
from tests.unit.backends.conftest import SERVER

CORPUS = CORPUS_ROOT / "polyaxonfiles"
FILES = sorted(p for p in CORPUS.glob("*.y*ml"))
CONTEXT = LaunchContext("0123456789ab", "/work/exp", "/opt/venv/bin/python", {"PHALANX_HOME": "/h"})
SETTINGS = Settings(home="/h")
KUBE = Cluster(name="k", kind="kubernetes", server_url=SERVER, namespace="ml", env_volume="phalanx-envs")


def loaded(path: Path):  # type: ignore[no-untyped-def]
    from phalanx.spec.loader import load_spec

    try:
        return load_spec(path)
    except SpecError:
        return None  # known-invalid files stay in the corpus on purpose (see its SOURCES.md)


def test_the_corpus_is_there_and_most_of_it_loads() -> None:
    assert len(FILES) >= 20
    assert sum(loaded(p) is not None for p in FILES) >= 15


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_a_corpus_file_renders_and_validates_on_every_engine(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # where srun is installed, an MPI render asks it for its plugins (a process): the choice itself
    # is tested in test_slurm_script.py, the render with the real srun in test_shell_words.py
    monkeypatch.setattr(SlurmBackend, "mpi_plugin", lambda self: "pmix")
    spec = loaded(path)
    if spec is None:
        return  # a known-invalid file (SOURCES.md): the loader refused it with a SpecError, as it must
    plan = build_plan(spec)
    asked = KUBE.backend_for(str(spec.backend) if spec.backend else None)

    hpc = Cluster(name="s", kind="slurm", shared_dir="/shared/phalanx")
    script = SlurmBackend(hpc, SETTINGS).dry_run(plan, CONTEXT).native
    assert script.startswith("#!"), script[
        :200
    ]  # bash parses it: tests/integration/processes/test_shell_words.py

    engines = {"kubernetes": KubernetesBackend(SETTINGS, KUBE), "kubeflow": KubeflowBackend(SETTINGS, KUBE)}
    for name, engine in engines.items():
        try:
            native = engine.dry_run(plan, CONTEXT).native
        except SpecError as exc:
            assert name != asked, f"{path.name} asks for {asked} but it refused: {exc}"
            assert "one pod template per role" in str(exc) or "no place for" in str(exc)
            continue
        if name == "kubeflow":
            assert job_problems(native[0]) == []
        else:
            validate_core(native)
