"""On a machine with CUDA GPUs (none in CI: skipped there), `phalanx run` gives each replica the GPUs
it asked for and no others, nccl works over them, and asking for more GPUs than exist is refused
before anything starts. Run on an H100 (one GPU) while this was written."""

from __future__ import annotations

import json
import shutil

import pytest

from .conftest import Phalanx

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or shutil.which("nvidia-smi") is None, reason="needs a CUDA GPU"
)

PROBE = (
    'python -c "import json, os, torch, torch.distributed as dist; '
    "n = torch.cuda.device_count(); "
    "info = {'replica': os.environ['PHALANX_REPLICA'], "
    "'visible': os.environ.get('CUDA_VISIBLE_DEVICES'), 'count': n}; "
    "dist.init_process_group('nccl' if n else 'gloo'); "
    "t = torch.ones(1, device='cuda' if n else 'cpu'); dist.all_reduce(t); "
    "info['sum'] = t.item(); info['backend'] = dist.get_backend(); "
    "print('PROBE', json.dumps(info), flush=True); dist.barrier(); dist.destroy_process_group()\""
)


def test_the_replica_asking_for_a_gpu_gets_it_and_runs_nccl(phalanx: Phalanx) -> None:
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          resources:
            gpu:
              requests: 1
              limits: 1
        run:
          cmd: {json.dumps(PROBE)}
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if "PROBE" in x)
    info = json.loads(line.split("PROBE", 1)[1])
    assert info["count"] == 1 and info["visible"] not in (None, "")
    assert info["backend"] == "nccl" and info["sum"] == 1.0


def test_a_replica_without_a_gpu_request_sees_none_beside_one_that_has_it(phalanx: Phalanx) -> None:
    script = (
        'python -c "import os, torch; '
        "print('SEEN', os.environ['PHALANX_REPLICA'], repr(os.environ.get('CUDA_VISIBLE_DEVICES')), "
        'torch.cuda.device_count(), flush=True)"'
    )
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          resources:
            gpu:
              requests: 1
              limits: 1
          replicas:
            n_workers: 1
        run:
          cmd: {json.dumps(script)}
        """
    )
    result = phalanx.run("run", "-f", str(spec), "--oversubscribe")
    assert result.returncode == 0, result.stderr
    seen = {x.split()[2]: x.split()[3:] for x in result.stdout.splitlines() if " SEEN " in f" {x}"}
    assert seen["master"][1] == "1", seen
    assert seen["worker-0"] == ["''", "0"], seen


def test_asking_for_more_gpus_than_exist_is_refused_before_anything_starts(phalanx: Phalanx) -> None:
    count = torch.cuda.device_count()
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        environment:
          resources:
            gpu:
              requests: {count + 1}
              limits: {count + 1}
        run:
          cmd: touch started
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 2
    assert "GPU" in result.stderr and "Traceback" not in result.stderr
    assert not (spec.parent / "started").exists()
