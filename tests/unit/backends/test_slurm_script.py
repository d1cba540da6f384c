"""The sbatch script a plan becomes: one task per replica process, heterogeneous components when
resources differ, Slurm's resource options, wiring computed from the allocation, the gang rule."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace

import pytest

from phalanx.backends import slurm as slurm_mod
from phalanx.backends import slurm_logs
from phalanx.backends.logfiles import Lines
from phalanx.backends.slurm import JOB_STATES, SlurmBackend, status_of
from phalanx.backends.slurm_script import PORTS_PER_JOB, base_port, layout
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework
from phalanx.errors import SpecError, UsageError
from phalanx.machine.box import Isolation
from phalanx.spec.model import ReplicaTemplate
from tests.unit.backends.conftest import context, plan, resources


def render(p, **cluster: str) -> str:  # type: ignore[no-untyped-def]
    cluster.setdefault("shared_dir", "/shared/phalanx")
    backend = SlurmBackend(Cluster(name="c", kind="slurm", **cluster), Settings(home="/home/u/.phalanx"))
    return backend.dry_run(p, context(PHALANX_HOME="/home/u/.phalanx")).native


def sbatch(script: str) -> list[str]:
    return [line[len("#SBATCH ") :] for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_equal_replicas_are_one_job_with_one_task_each() -> None:
    same = ReplicaTemplate(resources=resources(cpu=2))
    script = render(plan(workers=3, master=same, default_worker=same))
    opts = sbatch(script)
    assert "hetjob" not in opts
    assert {"--ntasks=4", "--cpus-per-task=2"} <= set(opts)
    assert "srun --export=ALL --kill-on-bad-exit=1" in script


def test_replicas_with_different_resources_become_heterogeneous_components() -> None:
    p = plan(
        workers=3,
        master=ReplicaTemplate(resources=resources(cpu=1, memory=512)),
        default_worker=ReplicaTemplate(resources=resources(cpu=2, memory=1024)),
        worker={2: ReplicaTemplate(resources=resources(cpu=4, memory=4096))},
    )
    script = render(p)
    opts = sbatch(script)
    assert opts.count("hetjob") == 2
    assert [c.resources.cpus for c in layout(p)] == [1, 2, 4]
    assert [len(c.tasks) for c in layout(p)] == [1, 2, 1]
    assert opts.count("--mem-per-cpu=512") == 2  # the master's 512 MiB, and 1024 MiB over 2 cpus
    assert "--mem-per-cpu=1024" in opts  # 4096 MiB over 4 cpus
    assert "srun --het-group=0-2 --export=ALL --kill-on-bad-exit=1" in script


def test_gpus_map_to_gres_with_one_replica_per_node_and_time_to_minutes() -> None:
    p = plan(
        workers=1,
        master=ReplicaTemplate(resources=resources(gpu=2, memory=2048)),
        default_worker=ReplicaTemplate(resources=resources(gpu=2, memory=2048)),
        max_run_seconds=90,
    )
    opts = sbatch(render(p, partition="gpu"))
    assert {"--gres=gpu:2", "--ntasks-per-node=1", "--mem=2048", "--partition=gpu", "--time=2"} <= set(opts)


def test_the_master_address_comes_from_the_allocation_not_the_render() -> None:
    script = render(plan(workers=2))
    assert 'export MASTER_ADDR="${ADDR[0]}"' in script
    assert 'export RANK="2"' in script  # worker-1
    assert "scontrol show hostnames" in script
    assert "NodeAddr" in script


def test_mxnet_scheduler_uri_is_the_masters_node() -> None:
    script = render(plan(framework=Framework.MXNET, workers=1, ps=1))
    assert 'export DMLC_PS_ROOT_URI="${ADDR[0]}"' in script
    assert 'export DMLC_ROLE="server"' in script


def test_every_replica_gets_its_phalanx_identity_and_shared_tracking() -> None:
    script = render(plan(workers=1), server_url="http://phalanx:8000")
    assert 'export PHALANX_REPLICA="worker-0"' in script
    assert 'export PHALANX_RANK="1"' in script
    assert "export PHALANX_HOST=http://phalanx:8000" in script
    assert "export PHALANX_CAPTURED=1" in script
    assert 'export PATH=/opt/venv/bin:"$PATH"' in script


def test_shared_dir_holds_the_run_folder_and_the_script_creates_it() -> None:
    script = render(plan(workers=1), shared_dir="/shared/phalanx")
    assert "export PHALANX_RUN_DIR=/shared/phalanx/runs/0123456789ab" in script
    # sbatch by hand works before the folder exists: the script makes it and redirects into it
    assert "--output=/dev/null" in sbatch(script)
    assert 'exec >>"$PHALANX_RUN_DIR/slurm-$SLURM_JOB_ID.out" 2>&1' in script


def test_a_cluster_without_a_shared_dir_is_refused_with_how_to_add_one() -> None:
    with pytest.raises(UsageError, match=r"no shared directory.*--shared-dir"):
        render(plan(workers=1), shared_dir="")


def test_tasks_get_only_the_scripts_environment_and_threads_from_their_cpus() -> None:
    four = ReplicaTemplate(resources=resources(cpu=4))
    script = render(plan(workers=1, master=four, default_worker=four))
    assert "--export=NONE" in sbatch(script)
    assert "srun --export=ALL" in script
    assert "THREADS=4" in script and 'export OMP_NUM_THREADS="$THREADS"' in script


def test_time_limit_signal_and_requeue_from_the_file() -> None:
    p = replace(plan(workers=1), max_run_seconds=600, max_restarts=2)
    opts = sbatch(render(p))
    assert "--time=10" in opts and "--signal=TERM@60" in opts and "--requeue" in opts
    assert "--no-requeue" in sbatch(render(plan(workers=1)))


def test_the_mpi_plugin_is_the_one_the_cluster_offers_pmix_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_mod.shutil, "which", lambda name: f"/usr/bin/{name}")  # srun is asked (below)
    backend = SlurmBackend(Cluster(name="c", kind="slurm", shared_dir="/s", slurm_conf="/x/a.conf"))
    listing = (
        "MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\nspecific pmix plugin versions available: pmix_v4\n"
    )
    backend._cmd = lambda argv, check=True: subprocess.CompletedProcess(argv, 0, listing, "")  # type: ignore[method-assign]
    slurm_mod._MPI_PLUGINS.pop("/x/a.conf", None)
    assert backend.mpi_plugin() == "pmix"
    slurm_mod._MPI_PLUGINS.pop("/x/a.conf", None)
    backend._cmd = lambda argv, check=True: subprocess.CompletedProcess(argv, 0, "\tnone\n\tpmi2\n", "")  # type: ignore[method-assign]
    assert backend.mpi_plugin() == "pmi2"


def test_mpi_with_parameter_servers_is_refused_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SlurmBackend, "mpi_plugin", lambda self: "pmix")  # no `srun --mpi=list` here
    with pytest.raises(SpecError, match="parameter servers"):
        render(plan(framework=Framework.HOROVOD, workers=1, ps=1))


def test_an_env_name_bash_cannot_export_is_refused() -> None:
    with pytest.raises(SpecError, match="not a valid environment variable"):
        render(plan(workers=0, env={"BAD-NAME": "1"}))


@pytest.mark.parametrize(
    ("native", "status"),
    [
        ("PENDING", ExperimentStatus.PENDING),
        ("RUNNING", ExperimentStatus.RUNNING),
        ("COMPLETED", ExperimentStatus.SUCCEEDED),
        ("FAILED", ExperimentStatus.FAILED),
        ("TIMEOUT", ExperimentStatus.FAILED),
        ("CANCELLED by 0", ExperimentStatus.STOPPED),
        ("SOMETHING_NEW", ExperimentStatus.UNKNOWN),
        ("", ExperimentStatus.UNKNOWN),
    ],
)
def test_slurm_job_states_map_through_one_table(native: str, status: ExperimentStatus) -> None:
    assert status_of(native) is status


def test_every_mapped_slurm_state_is_a_real_state_name() -> None:
    assert all(re.fullmatch(r"[A-Z_]+", k) for k in JOB_STATES)


def test_folders_with_blanks_are_quoted_for_sbatch() -> None:
    from phalanx.backends.base import LaunchContext

    backend = SlurmBackend(Cluster(name="c", kind="slurm", shared_dir="/shared/my runs"), Settings(home="/h"))
    ctx = LaunchContext("0123456789ab", "/home/u/my exp", "/usr/bin/python3", {})
    script = backend.dry_run(plan(workers=0), ctx).native
    opts = sbatch(script)
    assert '--chdir="/home/u/my exp"' in opts
    assert "export PHALANX_RUN_DIR='/shared/my runs/runs/0123456789ab'" in script


def test_several_processes_per_replica_are_tasks_with_torchrun_ranks() -> None:
    from dataclasses import replace

    p = plan(workers=1)
    p = replace(p, replicas=tuple(replace(r, processes=2) for r in p.replicas))
    tasks = [t for c in layout(p) for t in c.tasks]
    assert [t.key for t in tasks] == ["master", "master.1", "worker-0", "worker-0.1"]
    script = render(p)
    assert "--ntasks=4" in sbatch(script)
    case_3 = script.split("  3)\n", 1)[1].split(";;", 1)[0]
    assert 'export RANK="3"' in case_3 and 'export LOCAL_RANK="1"' in case_3
    assert 'export MASTER_ADDR="${ADDR[0]}"' in case_3


class ForgetfulSlurm(SlurmBackend):
    """Slurm after MinJobAge: squeue and scontrol no longer know the job; only the state files remain."""

    def _job(self, job_id: str) -> dict[str, str] | None:
        return None

    def _cmd(self, argv, check=True):  # type: ignore[no-untyped-def]
        return subprocess.CompletedProcess(argv, 0, "", "")


def _state(run_dir, **exits: str) -> str:  # type: ignore[no-untyped-def]
    (run_dir / "state").mkdir(parents=True)
    (run_dir / "tasks").write_text("\n".join(exits) + "\n")
    for key, code in exits.items():
        (run_dir / "state" / f"{key}.node").write_text("n1\n")
        if code:
            (run_dir / "state" / f"{key}.exit").write_text(code + "\n")
    return f"42:{run_dir}"


def test_a_forgotten_job_is_described_from_its_state_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    backend = ForgetfulSlurm(Cluster(name="c", kind="slurm", slurm_conf="forgetful"), Settings(home=tmp_path))
    done = backend.describe(_state(tmp_path / "a", master="0", **{"worker-0": "0"}))
    assert done is not None and done.status is ExperimentStatus.SUCCEEDED
    failed = backend.describe(_state(tmp_path / "b", master="0", **{"worker-0": "2"}))
    assert failed is not None and failed.status is ExperimentStatus.FAILED
    assert failed.reason == "worker-0 exited with code 2"
    killed = backend.describe(_state(tmp_path / "c", master="0", **{"worker-0": ""}))  # no exit written
    assert killed is not None and killed.status is ExperimentStatus.STOPPED
    assert backend.describe(f"42:{tmp_path / 'nothing'}") is None  # nothing left to tell


def test_a_failing_non_first_process_of_a_replica_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    backend = ForgetfulSlurm(Cluster(name="c", kind="slurm", slurm_conf="forgetful"), Settings(home=tmp_path))
    handle = _state(tmp_path / "p", master="0", **{"master.1": "3", "worker-0": "0", "worker-0.1": "0"})
    failed = backend.describe(handle)
    assert failed is not None and failed.status is ExperimentStatus.FAILED
    assert failed.reason == "master (process 1 of 2) exited with code 3"


def test_every_process_log_reaches_its_replica_with_its_rank(tmp_path) -> None:  # type: ignore[no-untyped-def]
    backend = ForgetfulSlurm(Cluster(name="c", kind="slurm", slurm_conf="forgetful"), Settings(home=tmp_path))
    handle = _state(tmp_path / "l", master="0", **{"master.1": "0", "worker-0": "0", "worker-0.1": "0"})
    logs = tmp_path / "l" / "logs"
    logs.mkdir()
    (logs / "worker-0.log").write_text("a\nb")
    (logs / "worker-0.1.log").write_text("c\n")
    assert list(backend.logs(handle, "worker-0")) == ["[rank 2] a", "[rank 2] b", "[rank 3] c"]


def test_a_log_is_read_a_slice_at_a_time_to_its_end_and_a_line_without_end_is_cut(  # type: ignore[no-untyped-def]
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's log is its own: root reads at most a slice of it at a time (a sparse 8 GiB log would
    fill root's memory), a line without end comes as pieces of the reaper's MAX_LINE, and a finished
    job's log is still read whole."""
    monkeypatch.setattr(slurm_logs, "LOG_READ_BYTES", 64)
    monkeypatch.setattr(slurm_logs, "Lines", lambda: Lines(most=32))
    backend = ForgetfulSlurm(Cluster(name="c", kind="slurm", slurm_conf="forgetful"), Settings(home=tmp_path))
    handle = _state(tmp_path / "l", master="0")
    logs = tmp_path / "l" / "logs"
    logs.mkdir()
    lines = [f"line {i}" for i in range(40)]  # 310 bytes: five slices
    (logs / "master.log").write_text("\n".join(lines) + "\n" + "x" * 200)
    got = list(backend.logs(handle, "master"))
    assert got[:40] == lines
    pieces = got[40:]
    assert pieces == ["x" * 32] * 6 + ["x" * 8]


def test_a_boxed_jobs_sbatch_reads_the_script_from_here_with_none_of_the_servers_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Root submits a server's job as its account: the script is handed to sbatch on its standard
    input (never read back from the account's folder, where it could be swapped for one saying
    --export=ALL), --export=NONE is on the command line, and sbatch sees no variable of the server's."""
    calls: list[dict[str, object]] = []

    def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        calls.append({"argv": argv, **kw})
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(slurm_mod.subprocess, "run", run)
    monkeypatch.setattr(slurm_mod.shutil, "which", lambda name, **kw: f"/usr/bin/{name}")
    monkeypatch.setenv("PHALANX_TOKEN", "the-servers-token")
    monkeypatch.setenv("PHALANX_DB_URL", "postgresql://phalanx:secret@db/phalanx")
    backend = SlurmBackend(
        Cluster(name="c", kind="slurm", shared_dir="/s", slurm_conf="/x/a.conf"), Settings(home="/h")
    )
    iso = Isolation("phx-nlp", 1234, 1234, "nlp", "http://127.0.0.1:9")
    dry = backend.dry_run(plan(workers=0), replace(context(), isolation=iso))
    backend.refuse_if_it_can_never_run(dry)
    (call,) = calls
    argv = call["argv"]
    assert isinstance(argv, list) and argv[0] == "sbatch" and "--test-only" in argv
    assert argv[-3:] == ["--uid=1234", "--gid=1234", "--export=NONE"]
    assert call["input"] == dry.native  # the script itself, from memory: no file is named
    assert not any(str(a).endswith(".sbatch") for a in argv)
    assert call["env"] == {"PATH": os.environ["PATH"], "SLURM_CONF": "/x/a.conf"}


def test_the_experiments_token_is_in_a_file_of_its_own_never_in_the_script_slurm_stores(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """slurmdbd keeps every job's script (`sacct --batch-script`): the script reads the token from
    the run folder's 0600 file, which the submit writes."""
    scripts: list[str] = []

    def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        scripts.append(str(kw.get("input")))
        return subprocess.CompletedProcess(argv, 0, "42\n" if "--parsable" in argv else "", "")

    monkeypatch.setattr(slurm_mod.subprocess, "run", run)
    monkeypatch.setattr(slurm_mod.shutil, "which", lambda name, **kw: f"/usr/bin/{name}")
    backend = SlurmBackend(Cluster(name="c", kind="slurm", shared_dir=str(tmp_path)), Settings(home="/h"))
    token = "phx-exp.0123456789ab.secret"
    dry = backend.dry_run(plan(workers=0), context(PHALANX_TOKEN=token, PHALANX_HOST="http://s:8000"))
    assert backend.submit(dry).startswith("42:")
    assert scripts and all(token not in s for s in [dry.native, *scripts])
    assert 'PHALANX_TOKEN=$(<"$PHALANX_RUN_DIR/token") || {' in dry.native
    written = tmp_path / "runs" / dry.context.experiment_id / "token"
    assert written.read_text() == token and written.stat().st_mode & 0o777 == 0o600


def test_a_tasks_file_naming_a_path_out_of_the_run_folder_reads_nothing_there(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The job writes its tasks file: a key like master.x/../../other/logs/master would have made
    root read another experiment's log. Only keys of a replica's form are taken."""
    other = tmp_path / "other" / "logs"
    other.mkdir(parents=True)
    (other / "master.log").write_text("AWS_SECRET_ACCESS_KEY=abc123\n")
    backend = ForgetfulSlurm(Cluster(name="c", kind="slurm", slurm_conf="forgetful"), Settings(home=tmp_path))
    handle = _state(tmp_path / "l", master="0")
    (tmp_path / "l" / "tasks").write_text("master\nmaster.x/../../../other/logs/master\n")
    (tmp_path / "l" / "logs").mkdir()
    (tmp_path / "l" / "logs" / "master.log").write_text("mine\n")
    assert list(backend.logs(handle, "master")) == ["mine"]


def test_discarding_logs_follows_no_link_the_job_planted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runs = tmp_path / "home" / "runs"
    (runs / "other" / "logs").mkdir(parents=True)
    (runs / "other" / "logs" / "master.log").write_text("kept\n")
    backend = ForgetfulSlurm(Cluster(name="c", kind="slurm", slurm_conf="forgetful"), Settings(home=tmp_path))
    run = tmp_path / "l"
    handle = _state(run, master="0")
    (run / "logs").mkdir()
    (run / "attempts" / "0" / "logs").mkdir(parents=True)
    (run / "attempts" / "1").symlink_to(runs / "other")  # attempts/*/logs would reach other/logs
    backend.discard_logs(handle)
    assert not (run / "logs").exists() and not (run / "attempts" / "0" / "logs").exists()
    assert (runs / "other" / "logs" / "master.log").read_text() == "kept\n"
    (run / "attempts").rename(run / "old")
    (run / "attempts").symlink_to(runs)  # attempts -> <home>/runs: every experiment's logs
    backend.discard_logs(handle)
    assert (runs / "other" / "logs" / "master.log").read_text() == "kept\n"


def test_the_attempt_counts_the_jobs_own_attempt_folders_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """attempts/ is the job's: a link there (to /usr/lib) or a million folders is no requeue."""
    backend = ForgetfulSlurm(Cluster(name="c", kind="slurm", slurm_conf="forgetful"), Settings(home=tmp_path))
    run = tmp_path / "l"
    handle = _state(run, master="0")
    (run / "attempts" / "0").mkdir(parents=True)
    (run / "attempts" / "1").mkdir()
    (run / "attempts" / "2").symlink_to(tmp_path)
    (run / "attempts" / "notes").mkdir()
    status = backend.describe(handle)
    assert status is not None and status.attempt == 2
    for n in range(3, 300):
        (run / "attempts" / str(n)).mkdir()
    status = backend.describe(handle)
    assert status is not None and status.attempt == slurm_mod.MAX_ATTEMPTS
    (run / "attempts").rename(run / "old")
    (run / "attempts").symlink_to("/usr/lib")
    status = backend.describe(handle)
    assert status is not None and status.attempt == 0


def test_a_jobs_ports_stay_below_the_ports_the_kernel_hands_to_outgoing_connections() -> None:
    """Linux gives any outgoing connection a port from 32768 on: a DDP master port there was taken
    at times (EADDRINUSE on a busy node)."""
    ports = {base_port(f"{i:06x}abcdef") for i in range(0, 1 << 24, 4099)}
    assert min(ports) >= 20000 and max(ports) + PORTS_PER_JOB <= 32768
    assert len(ports) > 700  # experiments spread over the ranges


def test_a_files_path_follows_the_interpreters_folder_and_its_path_is_the_nodes() -> None:
    """`env: {PATH: ...}` was overwritten without a word: it now comes after the experiment's
    interpreter, `$PATH` in it being the node's own."""
    script = render(plan(workers=1, env={"PATH": "/opt/tools/bin:$PATH"}))
    assert 'export PATH=/opt/venv/bin:/opt/tools/bin:"$PATH"' in script
    assert "export PATH=/opt/venv/bin:/opt/only" in render(plan(workers=1, env={"PATH": "/opt/only"}))


@pytest.mark.parametrize(
    ("given", "exported"),
    [
        ("$PATH:/opt/tools/bin", 'export PATH=/opt/venv/bin:"$PATH":/opt/tools/bin'),
        ("${PATH}:/opt/tools/bin", 'export PATH=/opt/venv/bin:"$PATH":/opt/tools/bin'),
        ("/a:$PATH:/b c", "export PATH=/opt/venv/bin:/a:\"$PATH\"':/b c'"),
    ],
)
def test_what_a_files_path_gives_after_the_nodes_path_is_kept(given: str, exported: str) -> None:
    """`$PATH:/opt/tools/bin` lost /opt/tools/bin (all after the first `:$PATH` was dropped) and
    `${PATH}` reached the replicas as those seven characters, the node's PATH gone: the local
    engine keeps both (test_local_path)."""
    assert exported in render(plan(workers=1, env={"PATH": given})).splitlines()
