"""`phalanx check` of a file larger than this machine notes every refusal `phalanx run` would answer
with (GPUs, cores, memory), each in run's words, and still succeeds: the file may be meant for a
cluster (docs/experiment-file.md)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.cli import phalanx_cli


def test_check_notes_the_gpu_refusal_next_to_the_cpu_one(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    spec = tmp_path / "gpus.yml"
    spec.write_text(
        "version: 1\nkind: experiment\nframework: pytorch\nenvironment:\n"
        f"  resources:\n    cpu: {{limits: {cores + 1}}}\n    gpu: {{requests: 1}}\n"
        "run:\n  cmd: python train.py\n"
    )
    # no GPU here, whatever the machine has: CUDA_VISIBLE_DEVICES empty hides them all
    done = phalanx_cli("check", "-f", spec, env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "would refuse it" in line]
    assert notes == [
        "note: `phalanx run` on this machine would refuse it: the experiment asks for 1 GPU(s) (master 1)"
        " but this machine has 0; lower the gpu requests or run it on a cluster (--cluster NAME)",
        f"note: `phalanx run` on this machine would refuse it: the experiment needs {cores + 1} cpu cores on"
        f" this machine, counted from the cpu limits (master {cores + 1}) but this machine has {cores} cores;"
        " lower the cpu limits, or pass --oversubscribe to run anyway (the local engine pins each replica"
        " to its cpu limit, so this machine counts limits, or the request where no limit is given; clusters"
        " schedule on requests)",
    ]
