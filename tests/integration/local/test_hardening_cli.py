"""Issue #10 through the CLI: mistakes that used to pass silently, and a terminal that goes away."""

from __future__ import annotations

import json
import subprocess

from .conftest import PHALANX, Phalanx

COUNTER = """
import time
for i in range(60):
    print(f"line {i}", flush=True)
    time.sleep(0.02)
print("saved the model", flush=True)
"""


def test_a_pipe_closed_early_stops_the_echo_not_the_experiment(phalanx: Phalanx) -> None:
    """`phalanx run -f ... 2>&1 | head -3`: the supervisor used to die of EPIPE ("the supervisor
    failed: [Errno 32] Broken pipe") and SIGTERM the replica while it was saving its model."""
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python count.py\n")
    (spec.parent / "count.py").write_text(COUNTER)
    proc = subprocess.Popen(
        [*PHALANX, "run", "-f", str(spec)],
        env=phalanx.env, cwd=phalanx.tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    phalanx.started.append(proc)  # type: ignore[arg-type]  # killed at teardown if it hangs
    assert proc.stdout is not None
    head = [proc.stdout.readline() for _ in range(3)]
    assert all(head), head
    proc.stdout.close()  # what `head` does after its third line
    assert proc.wait(timeout=120) == 0
    exp = phalanx.only_experiment()
    assert exp.status == "succeeded", exp.reason
    texts = [line.text for line in phalanx.store().logs(exp.id)]
    assert texts == [f"line {i}" for i in range(60)] + ["saved the model"]


def test_param_values_reach_the_command_as_one_argument_and_get_shows_the_launch(phalanx: Phalanx) -> None:
    """`it's` failed at run time after `check` passed, `a;echo X` ran a second command, and
    `phalanx get` could not show the params, command or file an experiment was launched with."""
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        params: {note: plain}
        run:
          cmd: python show.py {{ note }} --tag={{ tag }}
        """
    )
    (spec.parent / "show.py").write_text("import sys\nprint(repr(sys.argv[1:]))\n")
    done = phalanx.run("run", "-f", str(spec), "--param", "note=it's", "--param", "tag=a;echo INJECTED")
    assert done.returncode == 0, done.stderr
    assert "[master] [\"it's\", '--tag=a;echo INJECTED']" in done.stdout
    assert "[master] INJECTED" not in done.stdout
    exp = phalanx.only_experiment()
    shown = phalanx.cli("get", exp.id, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["launch"]["params"] == {"note": "it's", "tag": "a;echo INJECTED"}
    assert doc["launch"]["file"] == str(spec)
    assert doc["launch"]["commands"]["master"].endswith("show.py 'it'\"'\"'s' --tag='a;echo INJECTED'")
    assert doc["spec_text"] == spec.read_text()
    # recorded after its engine took it, but created before it started (it once read the other way)
    assert doc["created_at"] <= doc["started_at"] <= doc["attempts"][0]["started_at"]
    text = phalanx.cli("get", exp.id).stdout
    assert "--param:   note=it's tag=a;echo INJECTED" in text and "  master: " in text
    assert phalanx.cli("get", exp.id, "--file").stdout == spec.read_text()
    from fastapi.testclient import TestClient

    from phalanx.config import Settings
    from phalanx.server.app import create_app
    from phalanx.server.settings import ServerSettings

    server = ServerSettings(store=Settings(home=phalanx.home))
    with TestClient(create_app(server, phalanx.store()), base_url="http://127.0.0.1:8000") as client:
        api = client.get(f"/api/v1/experiments/{exp.id}").json()
    assert api["plan"]["launch"] == doc["launch"] and api["spec_text"] == doc["spec_text"]


def test_a_misspelt_param_is_refused_with_a_hint_unless_extras_are_asked_for(phalanx: Phalanx) -> None:
    spec = phalanx.spec("version: 1\nkind: experiment\nparams: {lr: 0.1}\nrun:\n  cmd: echo {{ lr }}\n")
    done = phalanx.cli("run", "-f", str(spec), "--param", "lrr=0.5")  # refused: in this process
    assert done.returncode == 2
    assert "--param lrr:" in done.stderr and "did you mean 'lr'?" in done.stderr
    assert "Traceback" not in done.stderr and not (phalanx.home / "runs").exists()
    kept = phalanx.run("run", "-f", str(spec), "--param", "lrr=0.5", "--extra-params")
    assert kept.returncode == 0, kept.stderr
    exp = phalanx.only_experiment()
    assert exp.plan["launch"]["params"] == {"lrr": 0.5} and exp.plan["params"]["lrr"] == 0.5


def test_a_failed_cluster_submit_announces_no_experiment_and_leaves_no_folder(phalanx: Phalanx) -> None:
    """The real sbatch refusing the job (here: a slurm.conf it cannot use) used to be preceded by
    `phalanx: experiment ID` for an experiment that never existed, and left its run folder."""
    import shutil

    import pytest

    if shutil.which("sbatch") is None:
        pytest.skip("Slurm's sbatch is not installed")
    shared = phalanx.tmp / "shared"
    shared.mkdir()
    conf = phalanx.tmp / "slurm.conf"
    conf.write_text("# no ClusterName: sbatch refuses at once\n")
    added = phalanx.cli(  # in this process: it only records the cluster
        "cluster", "add", "bad", "--kind", "slurm", "--shared-dir", str(shared), "--slurm-conf", str(conf)
    )
    assert added.returncode == 0, added.stderr
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: echo hi\n")
    done = phalanx.run("run", "-f", str(spec), "--cluster", "bad")
    assert done.returncode != 0
    assert "ClusterName" in done.stderr and "Traceback" not in done.stderr
    assert "phalanx: experiment" not in done.stderr + done.stdout
    assert [p for p in shared.rglob("*") if p.is_file()] == []  # no run folder of a job that never was
    assert not (shared / "runs").exists() or list((shared / "runs").iterdir()) == []
    for folder in ("runs", "spool"):
        assert not (phalanx.home / folder).exists() or list((phalanx.home / folder).iterdir()) == []
    assert phalanx.store().list_experiments().items == []


def test_console_output_is_kept_once_and_gc_removes_orphans_and_compacts_the_store(phalanx: Phalanx) -> None:
    """6 MB printed used to leave a 19 MB console spool that was never removed (against
    docs/tracking.md) next to the replica's log file, and nothing gave back what `phalanx delete`
    freed."""
    from phalanx.spool import SpoolWriter, host_tag

    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python print.py\n")
    (spec.parent / "print.py").write_text("for i in range(20000):\n    print('x' * 100, i)\n")
    done = phalanx.run("run", "-f", str(spec))
    assert done.returncode == 0, done.stderr
    exp = phalanx.only_experiment()
    assert len(phalanx.store().logs(exp.id, limit=100000)) == 20000
    spool = phalanx.home / "spool" / exp.id
    assert not spool.exists() or not list(spool.glob("*.spool")), list(spool.iterdir())
    assert not (phalanx.home / "runs" / exp.id / "logs").exists()  # the store holds the one copy

    # orphans: a run folder and a spool of experiments the store does not hold, written by a
    # process that has exited
    gone_pid = subprocess.Popen(["true"])
    gone_pid.wait()
    (phalanx.home / "runs" / "0rphan0000aa").mkdir(parents=True)
    orphan_spool = phalanx.home / "spool" / "0rphan0000bb"
    with SpoolWriter(
        orphan_spool, experiment_id="0rphan0000bb", stream=f"{host_tag()}-{gone_pid.pid}-ab12cd34"
    ) as w:
        w.write("text", {"title": "t", "text": "left behind", "level": 20, "step": None})
    deleted = phalanx.cli("delete", "-y", exp.id)
    assert deleted.returncode == 0, deleted.stderr
    db = phalanx.home / "phalanx.db"
    before = db.stat().st_size + (
        db.with_name("phalanx.db-wal").stat().st_size if db.with_name("phalanx.db-wal").exists() else 0
    )
    collected = phalanx.cli("gc", "--min-age", "0", "-o", "json")
    assert collected.returncode == 0, collected.stderr
    report = json.loads(collected.stdout)
    assert report["run_folders"] == ["0rphan0000aa"] and "0rphan0000bb" in report["spool_folders"]
    assert not (phalanx.home / "runs" / "0rphan0000aa").exists() and not orphan_spool.exists()
    assert report["store_bytes_after"] < before / 2  # VACUUM gave back the deleted console


def test_params_the_command_never_names_reach_the_script_through_connect(phalanx: Phalanx) -> None:
    """A group trial's sampled value that run.cmd never names (Polyaxon's cifar10 `num_layers`)
    must still reach the script: PHALANX_PARAMS, read by task.connect() and get_parameters()."""
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        declarations: {num_layers: 44, batch_size: 128}
        run:
          cmd: python depth.py
        """
    )
    (spec.parent / "depth.py").write_text(
        "from phalanx import Task\n"
        "task = Task.init()\n"
        "config = task.connect({'num_layers': 1, 'dropout': 0.5})\n"
        "print('config', sorted(config.items()), flush=True)\n"
        "print('all', sorted(task.get_parameters().items()), flush=True)\n"
    )
    done = phalanx.run("run", "-f", str(spec), "--param", "num_layers=46")
    assert done.returncode == 0, done.stderr
    assert "config [('dropout', 0.5), ('num_layers', 46)]" in done.stdout
    assert "all [('batch_size', 128), ('num_layers', 46)]" in done.stdout
    exp = phalanx.only_experiment()
    recorded = {(p.section, p.key): p.value for p in phalanx.store().params(exp.id)}
    assert recorded[("General", "num_layers")] == 46 and recorded[("General", "dropout")] == 0.5


def test_log_metrics_gives_each_process_of_a_multi_process_replica_its_own_series(phalanx: Phalanx) -> None:
    """With processes_per_replica: 2 both processes of `master` once wrote series "master":
    6 interleaved points for 3 steps, a chart that zigzags between two ranks."""
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas: {n_workers: 1, processes_per_replica: 2}
        run:
          cmd: python ranks.py
        """
    )
    (spec.parent / "ranks.py").write_text(
        "import os, phalanx\n"
        "for step in range(3):\n"
        "    phalanx.log_metrics(step=step, rank=float(os.environ['RANK']))\n"
    )
    done = phalanx.run("run", "-f", str(spec))
    assert done.returncode == 0, done.stderr
    exp = phalanx.only_experiment()
    series = phalanx.store().metrics(exp.id)["rank"]
    assert sorted(series) == ["rank 0", "rank 1", "rank 2", "rank 3"]
    for name, points in series.items():
        assert list(points.steps) == [0, 1, 2] and set(points.values) == {float(name.split()[1])}
