"""The SDK seen from a training script: what a plain `python script.py` with Task.init records."""

from __future__ import annotations

import signal

from tests.support.sandbox import Sandbox, wait_gone

from phalanx.domain import ExperimentStatus

MAIN = """
import argparse, os, sys
from phalanx import Task
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()              # parsed before Task.init: still recorded (section Args)
task = Task.init(project_name="examples", task_name="unit", tags="baseline")  # one tag as a string
assert Task.init("other", "ignored") is task
logger = task.get_logger()
for i in range(100):
    logger.report_scalar("loss", "master", 1.0 / (i + 1), i)
task.connect({"batch": 32, "optim": {"name": "sgd", "momentum": 0.9}})
task.connect({"depth": 4}, name="Model")
logger.report_text("hello text")
print("console line one")
print("to stderr", file=sys.stderr)
os.system("echo from a shell child")    # a child process writes straight to fd 1
assert task.flush() is True             # visible in the store when it returns
print("ID", task.id, "INGESTER", os.environ["PHALANX_INGESTER_PID"])
"""


def _ids(out: str) -> tuple[str, int]:
    words = out.split("ID ", 1)[1].split()
    return words[0], int(words[2])


def test_a_plain_script_records_everything_and_succeeds(sandbox: Sandbox) -> None:
    done = sandbox.run(MAIN, "--lr", "0.5")
    assert done.returncode == 0, done.stderr
    exp_id, ingester = _ids(done.stdout)
    assert "console line one" in done.stdout  # the console is teed, not swallowed
    wait_gone(ingester)  # the detached ingester drains and exits after the script
    store = sandbox.store()
    exp = store.get_experiment(exp_id)
    assert (exp.name, exp.project, exp.status) == ("unit", "examples", ExperimentStatus.SUCCEEDED)
    assert list(exp.tags) == ["baseline"]  # not ['b', 'a', 's', ...]
    assert store.metrics(exp_id)["loss"]["master"].steps == list(range(100))
    params = {(p.section, p.key): p.value for p in store.params(exp_id)}
    assert params == {
        ("Args", "lr"): 0.5,
        ("Args", "epochs"): 3,
        ("General", "batch"): 32,
        ("General", "optim/name"): "sgd",
        ("General", "optim/momentum"): 0.9,
        ("Model", "depth"): 4,
    }
    lines = [(line.stream, line.text) for line in store.logs(exp_id)]
    assert ("stdout", "console line one") in lines
    assert ("stderr", "to stderr") in lines
    assert ("stdout", "from a shell child") in lines
    assert store.texts(exp_id)[0]["text"] == "hello text"
    assert [r.name for r in store.list_replicas(exp_id)] == ["master"]


def test_an_uncaught_exception_marks_the_experiment_failed(sandbox: Sandbox) -> None:
    done = sandbox.run(
        """
        from phalanx import Task
        task = Task.init("examples", "fails")
        task.get_logger().report_scalar("loss", "master", 1.0, 0)
        raise ValueError("boom")
        """
    )
    assert done.returncode == 1 and "ValueError: boom" in done.stderr
    store = sandbox.ingested()
    exp = store.get_experiment(sandbox.only_experiment(store))
    assert exp.status == ExperimentStatus.FAILED and exp.reason == "ValueError: boom"
    assert store.metrics(exp.id)["loss"]["master"].values == [1.0]
    assert any("ValueError: boom" in line.text for line in store.logs(exp.id))


def test_sigterm_and_ctrl_c_mark_the_experiment_stopped_and_keep_what_was_reported(sandbox: Sandbox) -> None:
    code = """
        import sys, time
        from phalanx import Task
        task = Task.init("examples", "stopped")
        for i in range(1000):
            task.get_logger().report_scalar("loss", "master", float(i), i)
        sys.stdout.write("READY\\n"); sys.stdout.flush()
        time.sleep(600)
        """
    procs = {sig: sandbox.popen(code) for sig in (signal.SIGTERM, signal.SIGINT)}  # both start at once
    for sig, proc in procs.items():
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(sig)
    for proc in procs.values():
        assert proc.wait(120) != 0
    store = sandbox.ingested()
    exps = store.list_experiments().items
    assert len(exps) == 2
    for exp in exps:
        assert exp.status == ExperimentStatus.STOPPED, exp
        assert len(store.metrics(exp.id)["loss"]["master"].steps) == 1000
    assert {e.reason for e in exps} == {"terminated (SIGTERM)", "interrupted (SIGINT)"}


def test_sigterm_in_the_middle_of_a_flush_keeps_every_point_of_that_flush(sandbox: Sandbox) -> None:
    """SIGTERM while the main thread drains in flush(): the handler used to flush inside that drain
    and end the process without the points the drain had taken (33 of 40 real runs lost some). The
    script signals itself at a precise point of the drain, so the test does not depend on timing."""
    proc = sandbox.popen(
        """
        import signal, sys, threading
        from phalanx import Task
        from phalanx.tracking import client
        task = Task.init("examples", "sigterm mid-flush")
        logger = task.get_logger()
        real_encode = client.encode_columns

        def encode_columns(*columns):  # the drain has taken every point, and encodes the first chunk
            if threading.current_thread() is threading.main_thread():
                client.encode_columns = real_encode
                sys.stdout.write("SIGTERM\\n"); sys.stdout.flush()
                signal.raise_signal(signal.SIGTERM)
            return real_encode(*columns)

        sys.stdout.write(f"ID {task.id}\\n"); sys.stdout.flush()
        with task._reporter._drain_lock:  # the writer thread drains none of them: this flush takes all
            for i in range(25000):          # three records
                logger.report_scalar("loss", "master", float(i), i)
            client.encode_columns = encode_columns
            task.flush()
        sys.stdout.write("NOT ENDED\\n")
        """
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, (out, err)  # ended as SIGTERM ends a process
    assert out.split()[2:] == ["SIGTERM"], out
    exp_id = out.split()[1]
    store = sandbox.ingested()
    assert store.metrics(exp_id)["loss"]["master"].steps == list(range(25000))
    exp = store.get_experiment(exp_id)
    assert (exp.status, exp.reason) == (ExperimentStatus.STOPPED, "terminated (SIGTERM)")


def test_a_process_killed_after_flush_keeps_every_flushed_point_exactly_once(sandbox: Sandbox) -> None:
    proc = sandbox.popen(
        """
        import os, sys, time
        from phalanx import Task
        task = Task.init("examples", "killed")
        logger = task.get_logger()
        for i in range(20000):
            logger.report_scalar("loss", "master", float(i), i)
        ok = task.flush()
        sys.stdout.write(f"FLUSHED {ok} {task.id}\\n"); sys.stdout.flush()
        for i in range(20000, 40000):       # reported, never flushed
            logger.report_scalar("loss", "master", float(i), i)
        time.sleep(600)
        """
    )
    assert proc.stdout is not None
    _, ok, exp_id = proc.stdout.readline().split()
    assert ok == "True"
    store = sandbox.store()
    visible = store.metrics(exp_id)["loss"]["master"].steps  # before anything else ingests
    assert visible[:20000] == list(range(20000))
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    steps = sandbox.ingested().metrics(exp_id)["loss"]["master"].steps
    assert steps[:20000] == list(range(20000))
    assert len(steps) == len(set(steps))  # nothing twice
    assert sandbox.store().get_experiment(exp_id).status == ExperimentStatus.RUNNING  # nobody said otherwise


def test_processes_spawned_by_the_main_task_report_into_the_same_experiment(sandbox: Sandbox) -> None:
    done = sandbox.run(
        """
        import multiprocessing as mp, os, subprocess, sys
        from phalanx import Task

        def child(rank):
            os.environ["RANK"] = str(rank)
            task = Task.current_task()
            task.get_logger().report_scalar("loss", f"worker {rank:02d}", 0.5, 0)
            task.connect({f"worker_{rank}_stuff": rank})
            task.upload_artifact(f"temp {rank:02d}", artifact_object={"worker_rank": rank})
            print(f"child {rank} says hi", flush=True)

        if __name__ == "__main__":
            task = Task.init("examples", "children")
            fork = mp.get_context("fork").Process(target=child, args=(1,))
            fork.start(); fork.join()
            spawn = mp.get_context("spawn").Process(target=child, args=(2,))
            spawn.start(); spawn.join()
            code = (
                "import os; os.environ['RANK']='3'; from phalanx import Task; t = Task.init('x', 'y');"
                "t.get_logger().report_scalar('loss', 'worker 03', 0.5, 0); print('child 3 says hi')")
            subprocess.run([sys.executable, "-c", code], check=True)
            child(0)
            assert fork.exitcode == 0 and spawn.exitcode == 0
        """
    )
    assert done.returncode == 0, done.stderr
    store = sandbox.ingested()
    exp_id = sandbox.only_experiment(store)  # children never create experiments
    assert store.metric_titles(exp_id) == {"loss": [f"worker {r:02d}" for r in range(4)]}
    assert {a.name: a.rank for a in store.artifacts(exp_id)} == {f"temp {r:02d}": r for r in range(3)}
    assert {p.key: p.rank for p in store.params(exp_id)} == {f"worker_{r}_stuff": r for r in range(3)}
    texts = {line.text for line in store.logs(exp_id)}
    assert {f"child {r} says hi" for r in range(4)} <= texts


def test_log_metrics_reports_each_keyword_as_a_title_of_the_replica_series(sandbox: Sandbox) -> None:
    done = sandbox.run(
        """
        import phalanx
        from phalanx import Task
        try:
            phalanx.log_metrics(step=0, loss=1.0)
        except Exception as exc:
            print("NO TASK:", exc)
        Task.init("examples", "short form")
        for i in range(3):
            phalanx.log_metrics(step=i, loss=1.0 / (i + 1), acc=i / 3)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "NO TASK: phalanx.log_metrics: no experiment" in done.stdout
    store = sandbox.ingested()
    metrics = store.metrics(sandbox.only_experiment(store))
    assert metrics["loss"]["master"].steps == [0, 1, 2]
    assert metrics["acc"]["master"].values[2] == 2 / 3


def test_current_task_is_none_outside_an_experiment(sandbox: Sandbox) -> None:
    done = sandbox.run("from phalanx import Task\nprint(Task.current_task())\n")
    assert done.stdout.strip() == "None"
    assert not (sandbox.home / "spool").exists()


def test_flush_waits_for_the_ingester_of_the_launcher(sandbox: Sandbox) -> None:
    """Under `phalanx run` the supervisor's ingester acks; with none running flush says False."""
    store = sandbox.store()
    exp = store.create_experiment(name="a", project="p").id
    sandbox.env.update(
        PHALANX_EXPERIMENT_ID=exp, PHALANX_REPLICA="worker-0", PHALANX_ROLE="worker", PHALANX_INDEX="0",
        PHALANX_RANK="1", PHALANX_SPOOL=str(sandbox.home / "spool" / exp), PHALANX_INGESTER_PID="0",
    )  # fmt: skip
    done = sandbox.run(
        """
        from phalanx import Task
        task = Task.init("ignored", "ignored")
        task.get_logger().report_scalar("loss", "worker 01", 1.0, 0)
        print(task.flush(timeout=5), task.replica, task.rank)
        """
    )
    assert done.stdout.split() == ["False", "worker-0", "1"]
    store = sandbox.ingested()
    assert store.list_experiments().total == 1
    assert store.metrics(exp)["loss"]["worker 01"].values == [1.0]


def test_a_forked_child_of_a_plain_script_waits_until_its_points_are_stored(sandbox: Sandbox) -> None:
    """A plain script's forked child used to poll the ingester its parent had started, which only the
    parent can: it looked ended, and the child's flush() returned False at once, saying nothing,
    while its points were stored a moment later."""
    done = sandbox.run(
        """
        import os, sys
        from phalanx import Task
        task = Task.init("examples", "forked flush")
        logger = task.get_logger()
        pid = os.fork()
        if pid == 0:
            logger.report_scalar("loss", "child", 1.0, 0)
            ok = task.flush()
            sys.stdout.write(f"child {ok} {task.flush_problems}\\n"); sys.stdout.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        logger.report_scalar("loss", "parent", 2.0, 0)
        sys.stdout.write(f"parent {task.flush()}\\n")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["child True []", "parent True"], done.stdout


def test_a_replicas_forked_children_report_into_its_experiment(sandbox: Sandbox) -> None:
    store = sandbox.store()
    exp = store.create_experiment(name="a", project="p").id
    sandbox.env.update(PHALANX_EXPERIMENT_ID=exp, PHALANX_REPLICA="worker-1", PHALANX_RANK="2",
                       PHALANX_INGESTER_PID="0")  # fmt: skip
    done = sandbox.run(
        """
        import multiprocessing as mp
        from phalanx import Task

        def child():
            Task.current_task().get_logger().report_scalar("loss", "child", 2.0, 0)

        if __name__ == "__main__":
            logger = Task.init().get_logger()
            logger.report_scalar("loss", "parent", 1.0, 0)   # still buffered when the child forks
            p = mp.get_context("fork").Process(target=child)
            p.start(); p.join()
            assert p.exitcode == 0
        """
    )
    assert done.returncode == 0, done.stderr
    metrics = sandbox.ingested().metrics(exp)["loss"]
    assert {s: v.values for s, v in metrics.items()} == {"child": [2.0], "parent": [1.0]}


def test_arguments_parsed_before_the_sdk_was_imported_are_recorded_per_rank(sandbox: Sandbox) -> None:
    """`args = parser.parse_args()` first, `from phalanx import Task` later (inside main()): the
    Namespace the caller holds is recorded; each rank's differing value is kept."""
    store = sandbox.store()
    exp = store.create_experiment(name="a", project="p").id
    sandbox.env.update(PHALANX_EXPERIMENT_ID=exp, PHALANX_REPLICA="worker-0", PHALANX_INGESTER_PID="0")
    code = """
        import argparse, sys

        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--rank", type=int)
            parser.add_argument("--lr", type=float, default=0.1)
            args = parser.parse_args()
            from phalanx import Task
            Task.init("ignored", "ignored").flush(timeout=5)

        main()
        """
    for rank in ("1", "2"):
        sandbox.env["PHALANX_RANK"] = rank
        done = sandbox.run(code, "--rank", rank)
        assert done.returncode == 0, done.stderr
    records = sandbox.ingested().params(exp)
    assert [(p.key, p.rank, p.value) for p in records] == [("lr", 2, 0.1), ("rank", 1, 1), ("rank", 2, 2)]


def test_task_init_refuses_a_name_that_would_break_tables_before_recording_anything(sandbox: Sandbox) -> None:
    done = sandbox.run(
        """
        from phalanx import Task
        try:
            Task.init(project_name="p", task_name="first\\nsecond")
        except ValueError as exc:
            print("refused:", exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "refused: the name 'first\\nsecond' holds a control character" in done.stdout
    assert not list((sandbox.home / "spool").glob("*"))  # no experiment was started
