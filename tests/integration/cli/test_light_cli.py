"""`phalanx ls` stays light: a plain listing imports neither SQLAlchemy, pydantic, typer nor Alembic
(issue 30: they were 0.8 CPU-s of every `ls`); when upkeep is due it still takes the full path.
Counts of imported modules, not timings (bench/cli.py measures the CPU-s)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import phalanx_cli

from phalanx.config import Settings
from phalanx.domain import Event, EventKind, ExperimentStatus, Replica, Role
from phalanx.machine.procs import record_process
from phalanx.store import open_store

HEAVY = ("sqlalchemy", "alembic", "pydantic", "pydantic_core", "typer", "torch", "fsspec", "yaml")


def _phalanx(home: Path, *args: str) -> tuple[dict[str, object] | list[object], set[str]]:
    """Run `phalanx ARGS` under -X importtime: its JSON output and the top packages it imported."""
    out, imported = _printed(home, *args)
    return json.loads(out), imported


def _printed(home: Path, *args: str) -> tuple[str, set[str]]:
    """Run `phalanx ARGS` under -X importtime: what it printed and the top packages it imported."""
    env = {**os.environ, "PHALANX_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "phalanx.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done.stdout, imported


def _prints_as_the_full_store_without_the_heavy_libraries(home: Path, args: list[str]) -> None:
    """`phalanx ARGS` (the lean door) prints what `phalanx ARGS --local` (the full store) prints,
    importing none of HEAVY."""
    lean, imported = _printed(home, *args)
    full, full_imported = _printed(home, *args, "--local")
    assert lean == full, args
    assert "phalanx" in imported and "sqlalchemy" in full_imported  # both importtime lines read
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def _refused_on_both_doors(home: Path, *args: str) -> list[tuple[int, str, str]]:
    """Run `phalanx ARGS` (the lean door) and `phalanx ARGS --local` (the full store): each one's exit
    status, the last line of its stderr (--local first says "on this machine") and its whole stderr."""
    env = {**os.environ, "PHALANX_HOME": str(home)}
    said = [
        subprocess.run(
            [sys.executable, "-m", "phalanx.cli.main", *args, *more],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        for more in ([], ["--local"])
    ]
    return [(d.returncode, d.stderr.splitlines()[-1], d.stderr) for d in said]


def _experiments(home: Path, statuses: list[ExperimentStatus]) -> list[str]:
    store = open_store(Settings(home=home))
    try:
        return [
            store.create_experiment(name=f"e{i}", project="p", backend="local", status=s).id
            for i, s in enumerate(statuses)
        ]
    finally:
        store.close()


def test_ls_lists_experiments_without_importing_the_heavy_libraries(phalanx_home: Path) -> None:
    ids = _experiments(phalanx_home, [ExperimentStatus.SUCCEEDED, ExperimentStatus.FAILED])
    running = _experiments(phalanx_home, [ExperimentStatus.RUNNING])[0]
    record_process(phalanx_home / "runs" / running / "supervisor.pid")  # its supervisor (this test) runs
    listed, imported = _phalanx(phalanx_home, "ls", "-o", "json")
    assert isinstance(listed, list)
    assert {e["id"]: e["status"] for e in listed} == {  # type: ignore[index]
        ids[0]: "succeeded",
        ids[1]: "failed",
        running: "running",
    }
    assert "phalanx" in imported  # the importtime lines were read
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
    # nor what the lean check of a running experiment needs not (phalanx.ends; 7 ms, issue 42)
    assert not imported & {"logging", "shutil"}, sorted(imported & {"logging", "shutil"})


def test_ls_still_marks_an_experiment_whose_supervisor_was_killed(phalanx_home: Path) -> None:
    (orphan,) = _experiments(phalanx_home, [ExperimentStatus.RUNNING])
    pid_file = phalanx_home / "runs" / orphan / "supervisor.pid"
    pid_file.parent.mkdir(parents=True)
    # a pid whose recorded start time is not its own: that supervisor is gone (the pid was reused)
    pid_file.write_text(f"{os.getpid()} 1 {socket.gethostname()}\n")
    listed, imported = _phalanx(phalanx_home, "ls", "-o", "json")
    assert isinstance(listed, list)
    (row,) = listed
    assert row["status"] == "failed"  # type: ignore[index]
    assert "killed before it recorded the outcome" in row["reason"]  # type: ignore[index]
    assert "sqlalchemy" in imported  # the full path did the upkeep
    again, imported = _phalanx(phalanx_home, "ls", "-o", "json")
    assert again == listed
    assert "sqlalchemy" not in imported  # nothing due any more: the lean path


def test_run_detach_returns_the_recorded_id_imports_each_module_once_and_never_sqlalchemy(
    phalanx_home: Path, tmp_path: Path
) -> None:
    import time

    from phalanx.machine.procs import pid_alive

    spec = tmp_path / "t.yml"
    spec.write_text("version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n")
    open_store(Settings(home=phalanx_home)).close()  # a store at the newest revision: the lean writer's
    # -X importtime for the CLI and, through its environment, for the supervisor (its log)
    env = {**os.environ, "PHALANX_HOME": str(phalanx_home), "PYTHONPROFILEIMPORTTIME": "1"}
    argv = ["run", "-f", str(spec), "--detach", "-o", "json"]
    done = subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    started = json.loads(done.stdout)
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert not {"sqlalchemy", "alembic", "typer", "pydantic"} & imported, imported
    assert {"phalanx.cli.launching", "phalanx.spec.model"} <= imported  # it validated the file itself
    deadline = time.monotonic() + 120  # the supervisor ends the trivial run: a bounded wait for it
    while pid_alive(started["supervisor_pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    listed, _ = _phalanx(phalanx_home, "ls", "-o", "json")
    assert isinstance(listed, list)
    assert [(e["id"], e["status"]) for e in listed] == [(started["id"], "succeeded")]  # type: ignore[index]
    # the supervisor records through the lean writer (sqlite3): no SQLAlchemy, no Alembic (0.2 CPU-s)
    log = (phalanx_home / "runs" / started["id"] / "supervisor.log").read_text()
    supervised = {
        line.rsplit("|", 1)[1].strip() for line in log.splitlines() if line.startswith("import time:")
    }
    assert "phalanx.store.lite_writer" in supervised, sorted(supervised)[:20]
    # forked from the CLI (runner.forking): nothing the CLI imported is imported again, nor is the
    # file loaded twice (issue 42: one interpreter start and one set of imports for the submission)
    assert not imported & supervised, sorted(imported & supervised)
    heavy = sorted(m for m in supervised if m.startswith(("sqlalchemy", "alembic", "phalanx.store.sql")))
    assert not heavy, heavy
    # nor what only moving an artifact to a bucket or posting an alert needs (0.05 CPU-s, issue 42):
    # the code snapshot goes to the local artifact folder without fsspec
    assert not {"fsspec", "urllib.request", "http.client"} & supervised, sorted(supervised)
    # nor a group file's model (0.02-0.04 CPU-s), which every store used to import for a chart's axes
    assert not {"phalanx.spec.group", "phalanx.spec.group_model"} & supervised, sorted(supervised)
    # nor, on this machine, another engine, nor, in a folder with no ignore file, their parser
    assert not {"phalanx.backends.slurm", "pathspec"} & supervised, sorted(
        {"phalanx.backends.slurm", "pathspec"} & supervised
    )
    assert (phalanx_home / "artifacts" / started["id"] / "_source" / "source.tar.gz").is_file()


# what a foreground `phalanx run` never imports: Typer's parsing (0.15-0.2 CPU-s of every run, issue 42)
TYPERS = {"typer", "click", "pydantic", "pydantic_core"}


def _run_here(home: Path, spec: Path, *more: str) -> tuple[int, str, list[str], set[str]]:
    """`phalanx run -f SPEC MORE` in the foreground under -X importtime: its exit status, stdout and
    stderr lines with the experiment's id as ID, the replicas' states (whose elapsed times and
    whether `running` is seen before the end vary with the load) and --local's "on this machine"
    left out, and the packages and modules it imported."""
    import re

    env = {**os.environ, "PHALANX_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "phalanx.cli.main", "run", "-f", str(spec), *more],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    timed = [line for line in done.stderr.splitlines() if line.startswith("import time:") and "|" in line]
    imported = {line.rsplit("|", 1)[1].strip() for line in timed}
    said = [
        re.sub(r"\b[0-9a-f]{12}\b", "ID", line)
        for line in done.stderr.splitlines()
        if not line.startswith("import time:")
        and line != "phalanx: on this machine"
        and not re.fullmatch(r"phalanx: master \w+ \(\d+\.\d s\)", line)
    ]
    return done.returncode, re.sub(r"\b[0-9a-f]{12}\b", "ID", done.stdout), said, imported


def test_a_foreground_run_says_what_typers_says_without_importing_typer(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """A plain `phalanx run -f FILE` takes the lean door (0.15-0.2 CPU-s of Typer and pydantic less,
    issue 42) and prints, and exits with, what the Typer command prints (`--local` is Typer's); on an
    existing store its supervisor records without SQLAlchemy too."""
    spec = tmp_path / "trivial.yml"
    spec.write_text("version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n")
    open_store(Settings(home=phalanx_home)).close()  # a store at the newest revision: the lean writer's
    lean = _run_here(phalanx_home, spec)
    full = _run_here(phalanx_home, spec, "--local")
    assert lean[0] == full[0] == 0, (lean[2], full[2])
    assert lean[1:3] == full[1:3]
    assert lean[2] == [
        "phalanx: experiment ID (1 replica, local)",
        "phalanx: experiment ID succeeded",
        "phalanx: see it in the web UI: run `phalanx server` and open http://127.0.0.1:8000/experiments/ID",
    ], lean[2]
    assert "phalanx.supervisor" in lean[3] and "typer" in full[3]  # the importtime lines were read
    assert not TYPERS & lean[3], sorted(TYPERS & lean[3])
    assert "sqlalchemy" not in lean[3] and "phalanx.store.lite_writer" in lean[3]


# what a trivial local run never uses, each a module (and its dataclasses: 1-2 ms each to create)
# of its own paid on every run before issue 42: the alert hooks (a notice or a hang sends one), a
# box's accounts (a server's boxed run), checkpoints (`run.checkpoints`, a restart), clusters
# (`--cluster`), the data catalog (`inputs`), Horovod (`framework: horovod`), mpirun's tagged output
# and `statistics` (two ranks' pace)
UNUSED_BY_A_TRIVIAL_RUN = {
    *("phalanx.alerts", "phalanx.store.alert_records", "phalanx.machine.box_accounts"),
    *("phalanx.machine.identities", "phalanx.checkpoints", "phalanx.clusters", "phalanx.data"),
    *("phalanx.data.inputs", "phalanx.horovod", "phalanx.backends.local.mpi_output", "statistics"),
    "uuid",  # new ids come from phalanx.ids
}


def test_a_trivial_foreground_run_imports_nothing_it_does_not_use(phalanx_home: Path, tmp_path: Path) -> None:
    spec = tmp_path / "trivial.yml"
    spec.write_text("version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n")
    open_store(Settings(home=phalanx_home)).close()  # at the newest revision: the lean writer records
    code, _, said, imported = _run_here(phalanx_home, spec)
    assert code == 0, said
    assert {"phalanx.supervisor", "phalanx.backends.local.units"} <= imported  # the lines were read
    assert not UNUSED_BY_A_TRIVIAL_RUN & imported, sorted(UNUSED_BY_A_TRIVIAL_RUN & imported)


def test_a_failed_foreground_run_says_so_and_exits_1_on_both_doors(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """The failure's reason (the replica's last lines) and exit status 1 on the lean door as on
    Typer's; with -o json one JSON document on stdout, the replica's lines and states on stderr."""
    spec = tmp_path / "fails.yml"
    spec.write_text(
        "version: 1\nkind: experiment\nrun:\n  cmd: python -c \"import sys; print('bye'); sys.exit(3)\"\n"
    )
    lean = _run_here(phalanx_home, spec)
    full = _run_here(phalanx_home, spec, "--local")
    assert lean[0] == full[0] == 1, (lean[2], full[2])
    assert lean[1:3] == full[1:3]
    assert lean[1] == "[master] bye\n"
    assert "phalanx: experiment ID failed: master exited with code 3; last lines of its log:" in lean[2]
    assert not TYPERS & lean[3], sorted(TYPERS & lean[3])
    status, out, said, imported = _run_here(phalanx_home, spec, "-o", "json")
    assert status == 1 and not TYPERS & imported, said
    assert json.loads(out) == {
        "id": "ID",
        "status": "failed",
        "reason": "master exited with code 3; last lines of its log:\n  bye",
        "server": None,
        "supervisor_pid": None,
        "log": None,
    }
    assert "[master] bye" in said


def test_ls_where_and_column_use_the_run_table_grammar(phalanx_home: Path) -> None:
    from tests.unit.server import fill

    store = open_store(Settings(home=phalanx_home))
    try:
        made = {}
        for name, lr, losses in (("a", 0.1, [0.9, 0.4]), ("b", 0.001, [0.3]), ("c", 0.05, [0.8, 0.6])):
            e = fill.experiment(store, name=name, project="p", n_workers=0)
            fill.param(store, e.id, "Args", "lr", lr)
            fill.scalars(store, e.id, "loss", "master", losses)
            made[name] = e.id
    finally:
        store.close()
    where = "metric:min:loss < 0.5 and param:lr > 0.01"
    listed, _ = _phalanx(
        phalanx_home,
        "ls",
        "--where",
        where,
        "--column",
        "param:lr",
        "--column",
        "metric:min:loss",
        "-o",
        "json",
    )
    assert isinstance(listed, list)
    assert [(e["id"], e["columns"]) for e in listed] == [  # type: ignore[index]
        (made["a"], {"param:lr": 0.1, "metric:min:loss": 0.4})
    ]
    # the table and a mistake: what the command prints, in this process (tests/support/cli.py)
    table = phalanx_cli("ls", "--column", "param:lr", "--where", "param:lr < 0.06")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["ID", "PROJECT", "NAME", "STATUS", "CREATED", "DURATION", "param:lr"]
    assert sorted(line.split()[-1] for line in lines[1:]) == ["0.001", "0.05"]
    wrong = phalanx_cli("ls", "--where", "lr < 0.1")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert "param:KEY" in wrong.stderr  # says how to name the column


def test_logs_prints_what_the_full_path_prints_without_importing_the_heavy_libraries(
    phalanx_home: Path,
) -> None:
    """`phalanx logs ID` (0.55 -> 0.06 CPU-s, issue 42): the lean reader's lines are the full
    store's (`--local` takes the full path), for every console, one replica's and as JSON lines."""
    store = open_store(Settings(home=phalanx_home))
    try:
        replicas = [Replica("", "master", Role.MASTER, 0, 0), Replica("", "worker-0", Role.WORKER, 0, 1)]
        exp = store.create_experiment(
            name="n", project="p", backend="local", replicas=replicas, status=ExperimentStatus.FAILED
        )
        store.write_events(
            [
                Event(
                    exp.id, EventKind.LOG, {"stream": "stdout", "text": text}, replica=replica, time=t, seq=n
                )
                for n, (replica, text, t) in enumerate(
                    [
                        ("master", "step 1", 1.0),
                        ("worker-0", "ready", 2.0),
                        ("master", "done \x1b]0;x\x07", 3.0),
                    ]
                )
            ]
        )
    finally:
        store.close()
    for args in ([exp.id[:5]], [exp.id, "-r", "worker-0"], [exp.id, "-o", "json"]):
        lean, imported = _printed(phalanx_home, "logs", *args)
        full, full_imported = _printed(phalanx_home, "logs", *args, "--local")
        assert lean == full, args
        assert "phalanx" in imported and "sqlalchemy" in full_imported  # both importtime lines read
        assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
    assert lean.splitlines()[0] == json.dumps(
        {"replica": "master", "offset": 0, "time": 1.0, "text": "step 1"}
    )
    assert "[worker-0] ready" in _printed(phalanx_home, "logs", exp.id)[0].splitlines()


def test_metrics_prints_what_the_full_path_prints_without_importing_the_heavy_libraries(
    phalanx_home: Path,
) -> None:
    """`phalanx metrics ID` (0.55 -> 0.07 CPU-s, issue 42): the lean reader's table, JSON and CSV
    are the full store's (`--local`), and a title it lacks is refused in the same words."""
    from tests.unit.server import fill

    store = open_store(Settings(home=phalanx_home))
    try:
        exp = fill.experiment(store, name="m", project="p", n_workers=0)
        fill.scalars(store, exp.id, "loss", "master", [0.9, float("nan"), 0.25])
        fill.scalars(store, exp.id, "acc", "master", [0.5, 0.75])
        store.update_experiment(exp.id, status=ExperimentStatus.SUCCEEDED)
    finally:
        store.close()
    for args in ([exp.id[:6]], [exp.id, "-o", "json"], [exp.id, "-o", "csv", "--title", "loss"]):
        lean, imported = _printed(phalanx_home, "metrics", *args)
        full, full_imported = _printed(phalanx_home, "metrics", *args, "--local")
        assert lean == full, args
        assert "phalanx" in imported and "sqlalchemy" in full_imported  # both importtime lines read
        assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
    assert json.loads(_printed(phalanx_home, "metrics", exp.id, "-o", "json")[0])["loss"]["master"] == {
        "steps": [0, 1, 2],
        "values": [0.9, None, 0.25],
    }
    last = [said[:2] for said in _refused_on_both_doors(phalanx_home, "metrics", exp.id, "--title", "los")]
    assert last == [(2, f"error: experiment {exp.id} has no metric 'los' (titles: acc, loss)")] * 2, last


@pytest.mark.parametrize(
    "encoding",
    [
        {"PYTHONIOENCODING": "ascii"},
        # a C locale with Python's UTF-8 mode and locale coercion off: stdout's errors are
        # "surrogateescape", which raised UnicodeEncodeError as "strict" does
        {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": ""},
    ],
    ids=["PYTHONIOENCODING=ascii", "C-locale"],
)
def test_a_name_an_ascii_terminal_cannot_show_is_shown_escaped_not_a_traceback(
    phalanx_home: Path, encoding: dict[str, str]
) -> None:
    """PYTHONIOENCODING=ascii (or a C locale with Python's UTF-8 mode off): a title or a parameter a
    script reported in another alphabet is shown escaped, on the lean path and the full one alike."""
    from tests.unit.server import fill

    store = open_store(Settings(home=phalanx_home))
    try:
        exp = fill.experiment(store, name="m", project="p", n_workers=0)
        fill.scalars(store, exp.id, "größe", "master", [1.0])
        fill.param(store, exp.id, "Args", "größe", "groß")
        store.update_experiment(exp.id, status=ExperimentStatus.SUCCEEDED)
    finally:
        store.close()
    env = {**os.environ, "PHALANX_HOME": str(phalanx_home), **encoding}
    for command in ("metrics", "params"):
        for more in ([], ["--local"]):
            done = subprocess.run(
                [sys.executable, "-m", "phalanx.cli.main", command, exp.id, *more],
                capture_output=True,
                text=True,
                errors="replace",
                env=env,
                timeout=120,
            )
            assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
            assert "gr\\xf6\\xdfe" in done.stdout, done.stdout


def test_queue_reads_the_ledger_without_the_store_when_nothing_is_abandoned(phalanx_home: Path) -> None:
    _experiments(phalanx_home, [ExperimentStatus.SUCCEEDED])
    doc, imported = _phalanx(phalanx_home, "queue", "-o", "json")
    assert isinstance(doc, dict) and doc["running"] == [] and doc["queued"] == []
    assert "sqlalchemy" not in imported


def test_run_detach_reports_the_files_mistakes_with_status_2_before_anything_starts(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """`phalanx run --detach` validates the file before it starts a supervisor: located lines, one
    error line, exit status 2, no traceback, no run folder left."""
    spec = tmp_path / "bad.yml"
    spec.write_text("version: 1\nkind: experiment\nrun:\n  cmdd: python -c pass\n")
    done = phalanx_cli("run", "-f", spec, "--detach")  # in this process
    assert done.returncode == 2, done.stderr
    assert f"{spec}:4:3: run.cmdd: unknown key; did you mean 'cmd'?" in done.stderr
    assert f"error: {spec} is not a valid experiment file (2 problems)" in done.stderr
    assert done.stderr.count("error:") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""
    runs = phalanx_home / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_a_replicas_reaper_imports_neither_typing_nor_tempfile() -> None:
    """Every replica's processes are watched by a reaper of their own (`python -I`), so each module
    it imports is paid once per replica: typing (8 ms) and tempfile (with shutil and random, 4 ms)
    only for the type checker and for a boxed program's variables (issue 42, docs/cli-speed.md)."""
    import phalanx

    source = str(Path(phalanx.__file__).resolve().parents[1])
    boot = f"import sys; sys.path.insert(0, {source!r}); import phalanx.backends.local.reaper"
    done = subprocess.run(
        [sys.executable, "-I", "-X", "importtime", "-c", boot], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "phalanx.backends.local.reaper" in imported  # the importtime lines were read
    assert not {"typing", "tempfile", "shutil", "random"} & imported, sorted(imported)
    # nor dataclasses (with inspect, ast and dis: a third of its start-up): its records are Records
    assert not {"dataclasses", "inspect"} & imported, sorted(imported)


def test_a_supervisor_starts_its_replicas_before_it_imports_the_stores_sql() -> None:
    """A detached supervisor opens its store (SQLAlchemy and the schema check: 0.2-0.3 s) only once
    its first replicas have started (``supervisor.opener``), so neither it nor anything it imports to
    prepare and start them may import SQLAlchemy: a project's secrets, a dataset input's module and a
    cluster's placements read the store only when they are needed (issue 42)."""
    import phalanx

    source = str(Path(phalanx.__file__).resolve().parents[1])
    # a run with inputs imports their module as it prepares (a trivial run does not: UNUSED_BY_A_TRIVIAL_RUN)
    boot = f"import sys; sys.path.insert(0, {source!r}); import phalanx.runner.__main__, phalanx.supervisor"
    boot += ", phalanx.data.inputs"
    done = subprocess.run(
        [sys.executable, "-P", "-X", "importtime", "-c", boot], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert {"phalanx.supervisor.supervising", "phalanx.data.inputs"} <= imported  # the lines were read
    assert not {"sqlalchemy", "phalanx.store.sql", "alembic"} & imported, sorted(imported)


def test_params_and_artifacts_print_what_the_full_path_prints_without_importing_the_heavy_libraries(
    phalanx_home: Path,
) -> None:
    """`phalanx params ID` and `artifacts ID` (0.30 -> ~0.05 CPU-s, issue 42): the lean reader's
    tables and JSON are the full store's (`--local`), and a --kind mistake is refused alike."""
    from tests.unit.server import fill

    store = open_store(Settings(home=phalanx_home))
    try:
        exp = fill.experiment(store, name="p", project="p", n_workers=1)
        fill.param(store, exp.id, "Args", "lr", 0.1)
        fill.param(store, exp.id, "Args", "lr", 0.2, replica="worker-0")  # ranks differ: both shown
        fill.param(store, exp.id, "General", "layers", {"sizes": [64, 32]})
        store.write_events(
            [
                fill.event(exp.id, EventKind.ARTIFACT, {"name": n, "kind": k, "path": f"a/{n}", "size": z})
                for n, k, z in (("weights.bin", "bytes", 3 << 20), ("report/image/x", "report", 10))
            ]
        )
        store.update_experiment(exp.id, status=ExperimentStatus.SUCCEEDED)
    finally:
        store.close()
    for args in (
        ["params", exp.id[:6]],
        ["params", exp.id, "-o", "json"],
        ["artifacts", exp.id],
        ["artifacts", exp.id, "--kind", "report", "-o", "json"],
        ["artifacts", exp.id, "--kind", "image"],  # a kind it has none of: an empty answer
    ):
        _prints_as_the_full_store_without_the_heavy_libraries(phalanx_home, args)
    assert "lr      0.2                  worker-0  1" in _printed(phalanx_home, "params", exp.id)[0]
    assert "3.0 MiB" in _printed(phalanx_home, "artifacts", exp.id)[0]
    refused, refused_local = _refused_on_both_doors(phalanx_home, "artifacts", exp.id, "--kind", "reprot")
    assert refused[:2] == refused_local[:2] and refused[0] == 2, (refused, refused_local)
    assert "did you mean 'report'" in refused[2] and "Traceback" not in refused[2]


def test_get_prints_what_the_full_path_prints_without_importing_the_heavy_libraries(
    phalanx_home: Path,
) -> None:
    """`phalanx get ID` (0.34 -> ~0.1 CPU-s, issue 42): the lean reader's page and JSON are the full
    store's (`--local`): replicas, parameters, artifacts, models, metrics, reports, attempts, what
    ran, the pace of each rank; `--file` prints the file, or refuses alike where there is none."""
    from tests.unit.server import fill

    store = open_store(Settings(home=phalanx_home))
    try:
        exp = fill.experiment(store, name="g", project="p", n_workers=1)
        bare = store.create_experiment(name="script", project="p", backend="local")  # no file, nothing else
        fill.param(store, exp.id, "Args", "lr", 0.1)
        for replica, every in (("master", 1), ("worker-0", 2)):
            fill.scalars(store, exp.id, "loss", f"rank {replica}", [0.5] * (40 // every), replica)
        store.write_events(
            [
                fill.event(
                    exp.id, EventKind.ARTIFACT, {"name": "w.bin", "kind": "bytes", "path": "a/w", "size": 3}
                ),
                fill.event(
                    exp.id, EventKind.MODEL, {"name": "m", "format": "onnx", "path": "models/m", "size": 9}
                ),
                fill.event(exp.id, EventKind.TEXT, {"title": "notes", "text": "first\nsecond", "step": 1}),
            ]
        )
        first = store.add_attempt(exp.id, kind="start", started_at=10.0)
        store.finish_attempt(exp.id, first, status=ExperimentStatus.FAILED, reason="worker-0 exited 1")
        store.add_attempt(exp.id, kind="resume", checkpoint_step=20, started_at=20.0)
        store.set_repro(
            exp.id, {"git": {"commit": "c0ffee", "branch": "main"}, "python": "3.11", "host": "h"}
        )
        store.update_experiment(exp.id, status=ExperimentStatus.SUCCEEDED)
    finally:
        store.close()
    for args in (
        ["get", exp.id[:6]],
        ["get", exp.id, "-o", "json"],
        ["get", exp.id, "--file"],
        ["get", bare.id],
    ):
        _prints_as_the_full_store_without_the_heavy_libraries(phalanx_home, args)
    page = _printed(phalanx_home, "get", exp.id)[0]
    for shown in (
        "models:\n  m  (onnx, 9 B)",
        "resume from checkpoint step 20",
        "git c0ffee",
        "pace (loss):",
    ):
        assert shown in page, shown
    refused, refused_local = _refused_on_both_doors(phalanx_home, "get", bare.id, "--file")
    hint_here = refused_local[1].replace(" --local", "")  # (its hint keeps the door)
    assert refused[:2] == (refused_local[0], hint_here), (refused, refused_local)
    assert refused[0] == 2 and "not launched from a file" in refused[1], refused


def test_an_id_with_a_byte_the_locale_cannot_decode_is_no_experiment_not_a_traceback(
    phalanx_home: Path,
) -> None:
    """`phalanx params $'\\xff'` (a byte pasted from a Latin-1 terminal): Python hands it over as a
    lone surrogate, which sqlite3 cannot bind; both doors ended with a UnicodeEncodeError traceback."""
    _experiments(phalanx_home, [ExperimentStatus.SUCCEEDED])
    for command in ("params", "artifacts"):
        last = [said[:2] for said in _refused_on_both_doors(phalanx_home, command, "e\udcff")]
        assert last == [
            (2, "error: no experiment 'e\\udcff'; `phalanx ls` lists them"),
            (2, "error: no experiment 'e\\udcff'; `phalanx ls --local` lists them"),  # its door's hint
        ], last
