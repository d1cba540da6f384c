"""`phalanx run` as a user meets it: dry runs, refusals before anything starts, the DDP example."""

from __future__ import annotations

import json
import re
import sys

import pytest

from .conftest import REPO, Phalanx


def test_dry_run_prints_every_replicas_command_folder_and_env_and_starts_nothing(phalanx: Phalanx) -> None:
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        framework: pytorch
        params: {lr: 0.1}
        environment:
          replicas:
            n_workers: 2
        run:
          cmd: python train.py --lr {{ lr }}
        """
    )
    result = phalanx.cli("run", "-f", str(spec), "--dry-run", "-o", "json", "--param", "lr=0.5")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [r["name"] for r in doc["replicas"]] == ["master", "worker-0", "worker-1"]
    for replica in doc["replicas"]:
        assert replica["cwd"] == str(spec.parent)
        (proc,) = replica["processes"]
        assert proc["argv"] == ["/bin/sh", "-c", f"{sys.executable} train.py --lr 0.5"]
        assert proc["env"]["PHALANX_REPLICA"] == replica["name"]
    text = phalanx.cli("run", "-f", str(spec), "--dry-run")
    assert text.returncode == 0 and "# worker-1" in text.stdout and "RANK=2" in text.stdout
    assert list(phalanx.home.iterdir()) == []  # no store, no run folder


def test_an_invalid_file_exits_2_with_where_and_what(phalanx: Phalanx) -> None:
    spec = phalanx.spec("version: 1\nkind: experiment\nframework: pytroch\nrun:\n  cmd: 'true'\n")
    result = phalanx.cli("run", "-f", str(spec))
    assert result.returncode == 2
    assert "polyaxonfile.yml:3" in result.stderr and "Traceback" not in result.stderr
    assert list(phalanx.home.iterdir()) == []


def test_more_cores_than_the_machine_has_is_refused_unless_oversubscribed(phalanx: Phalanx) -> None:
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        environment:
          resources:
            cpu: {requests: 512, limits: 512}
        run:
          cmd: echo ran
        """
    )
    refused = phalanx.cli("run", "-f", str(spec))
    assert refused.returncode == 2
    assert "--oversubscribe" in refused.stderr and "Traceback" not in refused.stderr
    assert not (phalanx.home / "phalanx.db").exists()
    ran = phalanx.run("run", "-f", str(spec), "--oversubscribe")
    assert ran.returncode == 0, ran.stderr
    assert "[master] ran" in ran.stdout


def test_a_gpu_request_on_a_machine_without_gpus_is_refused_before_anything_starts(phalanx: Phalanx) -> None:
    from phalanx.machine.limits import detect_gpus

    if detect_gpus():
        pytest.skip("this machine has GPUs")
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        environment:
          resources:
            gpu: {requests: 1, limits: 1}
        run:
          cmd: echo ran
        """
    )
    result = phalanx.cli("run", "-f", str(spec))
    assert result.returncode == 2 and "GPU" in result.stderr
    assert not (phalanx.home / "phalanx.db").exists()


def test_the_pytorch_ddp_example_trains_to_at_least_093_and_reports_it(phalanx: Phalanx) -> None:
    example = REPO / "examples" / "pytorch-ddp" / "polyaxonfile.yml"
    result = phalanx.run("run", "-f", str(example))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    accuracy = float(re.findall(r"\[master\] test accuracy: ([0-9.]+)", result.stdout)[-1])
    assert accuracy >= 0.93
    exp = phalanx.only_experiment()
    metrics = phalanx.store().metrics(exp.id)
    assert set(metrics["loss"]) == {"worker 00", "worker 01"}
    assert metrics["accuracy"]["worker 00"].values[-1] == pytest.approx(accuracy, abs=1e-4)
    assert "name: pytorch-ddp-digits" in (exp.spec_text or "")  # the file as written, for the UI


def test_stderr_stays_stderr_under_phalanx_run_and_unmarked_in_the_reason(phalanx: Phalanx) -> None:
    script = phalanx.spec(
        "import sys\n"
        "print('out 1', flush=True)\n"
        "print('err 1', file=sys.stderr, flush=True)\n"
        "print('out 2', flush=True)\n"
        "sys.exit('err 2: giving up')\n",
        name="job.py",
    )
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        run:
          cmd: {sys.executable} {script}
        """
    )
    result = phalanx.run("run", "-f", str(spec), "-o", "json")
    assert result.returncode != 0
    exp_id = json.loads(result.stdout)["id"]
    from phalanx.config import Settings
    from phalanx.store import open_store

    store = open_store(Settings(home=phalanx.home))
    try:
        lines = [(ln.stream, ln.text) for ln in store.logs(exp_id) if ln.text.startswith(("out", "err"))]
        reason = store.get_experiment(exp_id).reason or ""
    finally:
        store.close()
    # each stream in its order (two pipes: the order between them is the reader's, as for any script)
    assert [t for st, t in lines if st == "stdout"] == ["out 1", "out 2"]
    assert [t for st, t in lines if st == "stderr"] == ["err 1", "err 2: giving up"]
    assert "err 2: giving up" in reason and "\x1b" not in reason  # the mark never reaches a reader
