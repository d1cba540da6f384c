"""`phalanx cluster add|ls|rm` and `phalanx run --cluster NAME --dry-run` as a user types them. The
commands run in this process (tests/support/cli.py); the first `cluster add` runs the `phalanx`
script itself, once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from tests.support.cli import phalanx_cli as phalanx

PHALANX = Path(sys.executable).parent / "phalanx"


def test_clusters_are_added_listed_and_removed(phalanx_home: Path) -> None:
    added = subprocess.run(
        [str(PHALANX), "cluster", "add", "hpc", "--kind", "slurm", "--partition", "gpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert added.returncode == 0, added.stderr
    done = phalanx(
        "cluster",
        "add",
        "k8s",
        "--kind",
        "kubernetes",
        "--namespace",
        "ml",
        "--context",
        "prod",
        "--server-url",
        "http://phalanx.ml.svc:8000",
    )
    assert done.returncode == 0, done.stderr
    listed = json.loads(phalanx("cluster", "ls", "-o", "json").stdout)
    assert listed == [
        {"name": "hpc", "kind": "slurm", "partition": "gpu"},
        {
            "name": "k8s",
            "kind": "kubernetes",
            "namespace": "ml",
            "context": "prod",
            "server_url": "http://phalanx.ml.svc:8000",
        },
    ]
    table = phalanx("cluster", "ls").stdout
    assert "hpc" in table and "partition=gpu" in table and "namespace=ml" in table
    assert phalanx("cluster", "rm", "hpc").returncode == 0
    assert [c["name"] for c in json.loads(phalanx("cluster", "ls", "-o", "json").stdout)] == ["k8s"]
    assert (phalanx_home / "clusters.toml").exists()


def test_mistakes_exit_2_with_a_message_and_change_nothing(phalanx_home: Path) -> None:
    phalanx("cluster", "add", "hpc", "--kind", "slurm")
    before = (phalanx_home / "clusters.toml").read_text()
    for args, message in [
        (("cluster", "add", "hpc", "--kind", "slurm"), "exists"),
        (("cluster", "add", "x", "--kind", "k8s"), "--kind must be one of slurm, kubernetes"),
        (("cluster", "add", "x", "--kind", "slurm", "--namespace", "ml"), "for kubernetes clusters"),
        (("cluster", "add", "bad name", "--kind", "slurm"), "not allowed"),
        (("cluster", "rm", "nope"), "no cluster named 'nope'"),
        (("cluster", "ls", "-o", "xml"), "'xml' is not one of 'table', 'json'"),
        (("cluster", "add", "x", "--kind", "kubernetes", "--server-url", "gpu-box"), "give the server's URL"),
        (("cluster", "add", "x", "--kind", "slurm", "--shared-dir", "shared"), "give an absolute path"),
        (("cluster", "add", "x", "--kind", "kubernetes"), "a kubernetes cluster needs --server-url"),
        (
            ("cluster", "add", "x", "--kind", "slurm", "--env-volume", "v"),
            "for kubernetes clusters, not slurm",
        ),
        (
            (
                "cluster",
                "add",
                "x",
                "--kind",
                "kubernetes",
                "--server-url",
                "http://p",
                "--kubeflow-api",
                "v3",
            ),
            "--kubeflow-api must be one of v1, trainer-v2",
        ),
    ]:
        done = phalanx(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert (phalanx_home / "clusters.toml").read_text() == before


def test_dry_run_on_a_kubernetes_cluster_prints_yaml_kubectl_can_apply(
    phalanx_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "polyaxonfile.yml").write_text(
        "version: 1\nkind: experiment\nframework: pytorch\nenvironment:\n  replicas:\n    n_workers: 1\n"
        "run:\n  cmd: python -u train.py\n"
    )
    phalanx(
        "cluster", "add", "k8s", "--kind", "kubernetes", "--namespace", "ml", "--server-url", "http://p:8000"
    )
    done = phalanx("run", "-f", tmp_path / "polyaxonfile.yml", "--cluster", "k8s", "--dry-run", "-o", "yaml")
    assert done.returncode == 0, done.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(done.stdout)]
    assert kinds == ["ConfigMap", "Service", "Pod", "Pod"]


def test_dry_run_on_kubeflow_refuses_differing_overrides_before_anything_is_created(
    phalanx_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "polyaxonfile.yml").write_text(
        "version: 1\nkind: experiment\nframework: pytorch\nbackend: kubeflow\nenvironment:\n  replicas:\n"
        "    n_workers: 2\n    worker:\n      - index: 1\n        resources:\n          memory:\n"
        "            requests: 512\n            limits: 512\nrun:\n  cmd: python -u train.py\n"
    )
    phalanx("cluster", "add", "k8s", "--kind", "kubernetes", "--server-url", "http://p:8000")
    done = phalanx("run", "-f", tmp_path / "polyaxonfile.yml", "--cluster", "k8s", "--dry-run")
    assert done.returncode == 2
    assert "one pod template per role" in done.stderr and "Traceback" not in done.stderr


def test_dry_run_on_a_slurm_cluster_prints_the_sbatch_script(phalanx_home: Path, tmp_path: Path) -> None:
    (tmp_path / "polyaxonfile.yml").write_text(
        "version: 1\nkind: experiment\nframework: pytorch\nenvironment:\n  replicas:\n    n_workers: 1\n"
        "run:\n  cmd: python -u train.py\n"
    )
    phalanx("cluster", "add", "hpc", "--kind", "slurm", "--partition", "debug")
    refused = phalanx("run", "-f", tmp_path / "polyaxonfile.yml", "--cluster", "hpc", "--dry-run")
    assert refused.returncode == 2 and "--shared-dir" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    phalanx(
        "cluster",
        "add",
        "hpc",
        "--kind",
        "slurm",
        "--partition",
        "debug",
        "--shared-dir",
        "/shared/x",
        "--replace",
    )
    done = phalanx("run", "-f", tmp_path / "polyaxonfile.yml", "--cluster", "hpc", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("#!/bin/bash")
    assert "#SBATCH --partition=debug" in done.stdout and "#SBATCH --ntasks=2" in done.stdout
