"""Each framework's wiring, read from inside real replicas started by `phalanx run`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import Phalanx

# Writes this replica's environment to env-<replica>[-<local rank>].json in the working folder.
DUMP = (
    'python -c "import json, os; '
    "name = os.environ['PHALANX_REPLICA'] + '-' + os.environ.get('LOCAL_RANK', '0'); "
    "json.dump(dict(os.environ), open('env-' + name + '.json', 'w'))\""
)


def envs(folder: Path) -> dict[str, dict[str, str]]:
    return {p.stem[4:]: json.loads(p.read_text()) for p in folder.glob("env-*.json")}


def test_pytorch_replicas_all_reduce_over_gloo_with_the_wiring_given(phalanx: Phalanx) -> None:
    script = phalanx.tmp / "exp" / "allreduce.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.tensor([float(dist.get_rank() + 1)])\n"
        "dist.all_reduce(t)\n"
        "print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], 'sum', t.item(), flush=True)\n"
        "dist.barrier()\n"
        "dist.destroy_process_group()\n"
    )
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1
        run:
          cmd: python allreduce.py
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 0, result.stderr
    assert "[master] rank 0 of 2 sum 3.0" in result.stdout
    assert "[worker-0] rank 1 of 2 sum 3.0" in result.stdout
    exp = phalanx.only_experiment()
    assert exp.status == "succeeded"
    lines = phalanx.store().logs(exp.id, replica="worker-0")
    assert any("sum 3.0" in line.text for line in lines)  # the console reached the store


def test_processes_per_replica_start_k_processes_numbered_as_torchrun_does(phalanx: Phalanx) -> None:
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1
            processes_per_replica: 2
        run:
          cmd: {json.dumps(DUMP)}
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 0, result.stderr
    got = envs(spec.parent)
    assert sorted(got) == ["master-0", "master-1", "worker-0-0", "worker-0-1"]
    assert [got[n]["RANK"] for n in ("master-0", "master-1", "worker-0-0", "worker-0-1")] == [
        "0",
        "1",
        "2",
        "3",
    ]
    assert {e["WORLD_SIZE"] for e in got.values()} == {"4"}
    assert got["worker-0-1"]["NODE_RANK"] == "1" and got["worker-0-1"]["LOCAL_WORLD_SIZE"] == "2"
    assert len({e["MASTER_PORT"] for e in got.values()}) == 1
    for name, env in got.items():
        assert env["PHALANX_EXPERIMENT_ID"] == phalanx.only_experiment().id
        assert env["PHALANX_SPOOL"] == str(phalanx.home / "spool" / env["PHALANX_EXPERIMENT_ID"])
        assert env["PHALANX_CAPTURED"] == "1" and env["PHALANX_HOME"] == str(phalanx.home)
        assert env["PHALANX_ROLE"] == name.split("-")[0]


def test_tensorflow_gets_tf_config_and_its_servers_are_stopped_once_the_chief_succeeds(
    phalanx: Phalanx,
) -> None:
    # workers and ps dump their TF_CONFIG and then serve forever, as tf.distribute.Server.join() does
    serve = DUMP + ' && if [ "$PHALANX_ROLE" != master ]; then exec sleep 600; fi'
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: tensorflow
        environment:
          replicas:
            n_workers: 2
            n_ps: 1
        run:
          cmd: {json.dumps(serve)}
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 0, result.stderr
    configs = {name: json.loads(env["TF_CONFIG"]) for name, env in envs(spec.parent).items()}
    assert configs["master-0"]["task"] == {"type": "chief", "index": 0}
    assert configs["worker-1-0"]["task"] == {"type": "worker", "index": 1}
    assert configs["ps-0-0"]["task"] == {"type": "ps", "index": 0}
    cluster = configs["master-0"]["cluster"]
    assert [len(cluster[k]) for k in ("chief", "worker", "ps")] == [1, 2, 1]
    assert all(c["cluster"] == cluster for c in configs.values())
    exp = phalanx.only_experiment()
    assert exp.status == "succeeded"
    states = {r.name: r.state for r in phalanx.store().list_replicas(exp.id)}
    assert states == {"master": "succeeded", "worker-0": "stopped", "worker-1": "stopped", "ps-0": "stopped"}


def test_mxnet_gets_the_dmlc_variables_of_each_role(phalanx: Phalanx) -> None:
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: mxnet
        environment:
          replicas:
            n_workers: 2
            n_ps: 1
        run:
          cmd: {json.dumps(DUMP)}
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 0, result.stderr
    got = envs(spec.parent)
    assert {n: e["DMLC_ROLE"] for n, e in got.items()} == {
        "master-0": "scheduler",
        "worker-0-0": "worker",
        "worker-1-0": "worker",
        "ps-0-0": "server",
    }
    for env in got.values():
        assert env["DMLC_PS_ROOT_URI"] == "127.0.0.1" and env["DMLC_INTERFACE"] == "lo"
        assert env["DMLC_NUM_WORKER"] == "2" and env["DMLC_NUM_SERVER"] == "1"
        assert env["DMLC_PS_ROOT_PORT"] == got["master-0"]["DMLC_PS_ROOT_PORT"]


needs_mpirun = pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="Open MPI is not installed (make test installs it)"
)


def mpi_spec(phalanx: Phalanx, replicas: str, cmd: str) -> Path:
    """A PyTorch experiment started by one mpirun (``backend: mpi``) with ``replicas`` (one line)."""
    return phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        backend: mpi
        environment:
          replicas:
            {replicas}
        run:
          cmd: {json.dumps(cmd)}
        """
    )


@needs_mpirun
def test_backend_mpi_starts_one_mpirun_whose_ranks_torch_and_phalanx_understand(phalanx: Phalanx) -> None:
    dump = DUMP.replace("os.environ.get('LOCAL_RANK', '0')", "os.environ['RANK']")
    spec = mpi_spec(phalanx, "n_workers: 2", dump)
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr
    got = envs(spec.parent)
    assert sorted(got) == ["master-0", "worker-0-1", "worker-1-2"]
    for env in got.values():
        assert env["WORLD_SIZE"] == "3" and env["MASTER_ADDR"] == "127.0.0.1"
        assert env["RANK"] == env["OMPI_COMM_WORLD_RANK"]


@needs_mpirun
def test_an_mpirun_replica_of_several_ranks_shows_each_ranks_lines_whole_and_untagged(
    phalanx: Phalanx,
) -> None:
    # unbuffered print() writes the text and the newline apart: mpirun tags each piece, so two
    # ranks' pieces interleave in its stream and must be put back together per rank
    talk = (
        "python -u -c \"import os, time; r = os.environ['RANK']; "
        "[print(f'line {i} of rank {r}') or time.sleep(0.01) for i in range(30)]\""
    )
    result = phalanx.run("run", "-f", str(mpi_spec(phalanx, "processes_per_replica: 2", talk)))
    assert result.returncode == 0, result.stdout + result.stderr
    exp_id = result.stderr.split("experiment ")[1].split()[0]
    logs = phalanx.cli("logs", exp_id)
    assert logs.returncode == 0, logs.stderr
    lines = [line for line in logs.stdout.splitlines() if "line " in line]
    expected = [f"[rank {r}] line {i} of rank {r}" for r in (0, 1) for i in range(30)]
    assert sorted(line.removeprefix("[master] ") for line in lines) == sorted(expected)
    assert "<stdout>" not in logs.stdout


def test_after_the_chief_succeeds_workers_that_end_by_themselves_are_not_killed(phalanx: Phalanx) -> None:
    """MultiWorkerMirroredStrategy workers finish just after the chief: they get to end cleanly."""
    # the chief ends once the worker runs (not at once): the supervisor's 5 s grace after the chief
    # then covers the worker's last second, not also its reaper's start on a loaded machine
    finish = (
        'if [ "$PHALANX_ROLE" = worker ]; then touch "started-$PHALANX_REPLICA"; sleep 1; '
        'echo done > "done-$PHALANX_REPLICA"; fi; '
        'if [ "$PHALANX_ROLE" = ps ]; then exec sleep 600; fi; '
        'if [ "$PHALANX_REPLICA" = master ]; then i=0; '
        "while [ ! -e started-worker-0 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done; fi"
    )
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: tensorflow
        environment:
          replicas:
            n_workers: 1
            n_ps: 1
        run:
          cmd: {json.dumps(finish)}
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 0, result.stderr
    assert (spec.parent / "done-worker-0").read_text() == "done\n"
    exp = phalanx.only_experiment()
    states = {r.name: r.state for r in phalanx.store().list_replicas(exp.id)}
    assert states == {"master": "succeeded", "worker-0": "succeeded", "ps-0": "stopped"}
