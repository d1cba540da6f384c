"""Before anything starts: the plan, the engine, the interpreter, the SDK copy, the dry run."""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx import buildenv
from phalanx.backends.base import Backend, DryRun, LaunchContext
from phalanx.backends.dry_runs import LocalDryRun
from phalanx.backends.registry import get_backend
from phalanx.buildprogress import BuildProgress
from phalanx.config import Settings
from phalanx.domain import Framework
from phalanx.ids import new_id
from phalanx.machine.box import Isolation, box_folder
from phalanx.plan import Plan, build_plan
from phalanx.sdkcopy import sdk_path
from phalanx.spec.inputs import from_record
from phalanx.spec.model import Build, ExperimentSpec
from phalanx.store import open_store
from phalanx.tokens import box_key, experiment_token
from phalanx.tracking.identity import ENV_INGESTER_PID as INGESTER_PID

if TYPE_CHECKING:
    from phalanx.clusters import Cluster

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """Everything decided before anything starts: what `--dry-run` shows."""

    experiment_id: str
    plan: Plan
    backend: Backend
    context: LaunchContext
    dry_run: DryRun
    cluster: str | None = None
    launch: Mapping[str, Any] | None = None  # file, params, workdir, cluster: what rerun/resume need


# ---- preparing --------------------------------------------------------------------------------


def interpreter(
    plan: Plan,
    workdir: str,
    settings: Settings,
    build: bool = True,
    venvs_dir: Path | None = None,
    isolation: Isolation | None = None,
    progress: BuildProgress | None = None,
) -> str:
    """The experiment's python: its build venv (built on first use unless ``build`` is False), else
    the interpreter running Phalanx. ``venvs_dir``: where venvs live (a cluster's shared folder).
    ``isolation``: a boxed experiment's venv is its project's own (``<venvs>/boxes/<account>``),
    built in a box as that account (pip runs the packages' own code). ``progress``: told how the
    build goes (the experiment's console; else the terminal and the log)."""
    own = venvs_dir or settings.venvs_dir
    venvs = own if isolation is None else own / "boxes" / isolation.account
    if plan.framework is Framework.HOROVOD:  # its tools' venv is built by this process: in its folder
        plan = replace(plan, build=with_horovod(plan.build, workdir, own, build, progress))
    if not buildenv.wants_env(plan.build):
        return sys.executable
    if not build:  # dry run: where the venv is or would be, without building it
        return str(venvs / buildenv.env_hash(plan.build, workdir, isolation) / "bin" / "python")
    return str(buildenv.ensure_env(plan.build, workdir, venvs, box=isolation, progress=progress))


def with_horovod(
    build_spec: Build, workdir: str, venvs: Path, build: bool = True, progress: BuildProgress | None = None
) -> Build:
    """The experiment's build plus Horovod: its torch pin (this machine's default when it names none)
    and the Horovod wheel built for it (built once per machine, see ``phalanx.horovod``)."""
    from phalanx import horovod  # why: `framework: horovod` only (issue 42)
    from phalanx.frameworks.packages import framework_packages  # why: `framework: horovod` only

    pin = horovod.torch_pin_of(build_spec.pip_packages)
    # torch (this machine's pin unless named), numpy and what save_model's ONNX export needs
    packages = framework_packages(
        Framework.HOROVOD, build_spec.pip_packages, _requirements(build_spec, workdir)
    )
    extra = list(packages[len(build_spec.pip_packages) :])
    pin = pin or buildenv.torch_pin()
    if build:
        tools = Build(pip_packages=(f"torch=={pin}", *horovod.BUILD_PACKAGES))
        wheel = horovod.ensure_wheel(  # built by this process (root, on a server): in its own folder
            pin,
            lambda: buildenv.ensure_env(tools, venvs, venvs, progress=progress),
            progress=_progress if progress is None else progress.note,
        )
    else:
        wheel = horovod.expected_wheel(pin)
    return replace(build_spec, pip_packages=(*build_spec.pip_packages, *extra, str(wheel)))


def _requirements(build_spec: Build, workdir: str) -> str | None:
    return str(Path(workdir) / build_spec.requirements) if build_spec.requirements else None


def _progress(text: str) -> None:
    """Build progress on the terminal (stderr), as the venv build reports its own."""
    sys.stderr.write(f"phalanx: {text}\n")
    sys.stderr.flush()


def tracking_env(
    experiment_id: str,
    settings: Settings,
    python: str,
    dry: bool = False,
    sdk_root: Path | None = None,
    isolation: Isolation | None = None,
) -> dict[str, str]:
    """What every replica's tracking SDK needs (contract 1), plus the SDK copy for foreign venvs.
    A boxed replica (``isolation``) gets no PHALANX_HOME: it spools in its own folder and ships to
    the server over HTTP with its experiment's write-only token (``boxed_tracking_env``)."""
    if isolation is not None:
        return boxed_tracking_env(experiment_id, settings, python, isolation, dry, sdk_root)
    env = {
        "PHALANX_HOME": str(settings.home),
        "PHALANX_SPOOL": str(settings.spool_dir / experiment_id),
        "PHALANX_CAPTURED": "1",
    }
    if os.environ.get("PHALANX_SYSTEM_METRICS"):  # --no-system-metrics reaches a cluster job's sampler
        env["PHALANX_SYSTEM_METRICS"] = os.environ["PHALANX_SYSTEM_METRICS"]
    if settings.host:
        env["PHALANX_HOST"] = settings.host
        if settings.token:  # a token that writes this experiment only (docs/security.md)
            env["PHALANX_TOKEN"] = experiment_token(settings.token, experiment_id)
    # abspath, not realpath: every venv's bin/python links to the same base interpreter
    if os.path.abspath(python) != os.path.abspath(sys.executable) and not dry:
        env["PYTHONPATH"] = str(sdk_path(sdk_root or settings.home))
    return env


def boxed_tracking_env(
    experiment_id: str,
    settings: Settings,
    python: str,
    isolation: Isolation,
    dry: bool = False,
    sdk_root: Path | None = None,
) -> dict[str, str]:
    """A boxed replica's tracking wiring: its spool in its box folder (nothing of the server's home),
    the server's URL and a token under the home's box key that only adds records and files to this
    experiment (phalanx.tokens)."""
    env = {
        "PHALANX_SPOOL": str(box_folder(settings.home, experiment_id) / "spool"),
        "PHALANX_CAPTURED": "1",
        "PHALANX_HOST": isolation.report_to,
        "PHALANX_TOKEN": experiment_token(box_key(settings.home), experiment_id),
    }
    if os.path.abspath(python) != os.path.abspath(sys.executable) and not dry:
        env["PYTHONPATH"] = str(sdk_path(sdk_root or settings.home))
    return env


def _placed(cluster: Cluster, project: str, settings: Settings) -> Cluster:
    """The cluster as the project's jobs use it (its Slurm account and partition, its namespace:
    `phalanx cluster map`), read from the home's store when there is one (a dry run creates none)."""
    if not (settings.db_url or (settings.home / "phalanx.db").exists()):
        return cluster
    # a local experiment's supervisor imports SQLAlchemy only once its replicas have started (opener)
    from phalanx.store.placements import placed  # why: its SQL imports SQLAlchemy

    store = open_store(settings)
    try:
        return placed(cluster, project, store)
    finally:
        store.close()


def prepare(
    spec_or_plan: ExperimentSpec | Plan,
    *,
    settings: Settings | None = None,
    params: Mapping[str, Any] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    experiment_id: str | None = None,
    oversubscribe: bool = False,
    cluster: str | None = None,
    backend: Backend | None = None,
    dry: bool = False,
    launch: Mapping[str, Any] | None = None,
    isolation: Isolation | None = None,
    progress: BuildProgress | None = None,
) -> Prepared:
    """Plan, pick the engine, build the venv (unless ``dry``) and dry-run: nothing started or stored.
    ``progress``: told how the build goes (``BuildProgress``: the experiment's console).
    ``isolation``: box it (a server's submission: the local engine's box, a Slurm job as the
    project's account, a hardened Kubernetes pod; its venv built in a box here).

    Raises SpecError / UsageError (exit 2) for what cannot run (a GPU that is not there, a topology
    larger than the machine without ``oversubscribe``, a cluster that does not exist).
    """
    settings = settings or Settings()
    if isinstance(spec_or_plan, Plan):
        plan = spec_or_plan
        source = None
    else:
        plan = build_plan(spec_or_plan, params)
        source = spec_or_plan.source_file
    if workdir is None:
        workdir = Path(source).parent if source else Path.cwd()
    workdir = str(Path(workdir).resolve())
    exp_id = experiment_id or new_id()
    cluster_conf = None
    engine_name = "local"
    if cluster:
        from phalanx.clusters import get_cluster  # why: `--cluster` only: a local run reads none (issue 42)

        cluster_conf = _placed(get_cluster(cluster, settings.home), plan.project, settings)
        engine_name = cluster_conf.backend_for(str(plan.backend) if plan.backend else None)
    if backend is None:
        backend = get_backend(engine_name, settings=settings, cluster=cluster_conf)
    shared = _shared_dir(cluster_conf)
    boxed = isolation  # the local engine boxes it, Slurm and Kubernetes their own way; Ray refuses it
    # a Ray node builds the environment itself (once per node): nothing to build on this machine
    on_nodes = cluster_conf is not None and cluster_conf.kind == "ray"
    python = interpreter(
        plan,
        workdir,
        settings,
        build=not (dry or on_nodes),
        venvs_dir=shared / "venvs" if shared else None,
        isolation=boxed,
        progress=progress,
    )
    env = tracking_env(exp_id, settings, python, dry=dry, sdk_root=shared, isolation=boxed)
    if plan.checkpoints:
        from phalanx.checkpoints import policy_env  # why: `run.checkpoints` only (issue 42)

        env.update(policy_env(plan.checkpoints))
    reader = isolation.project if isolation is not None else None  # its project's data, its credentials
    plan, input_env, fetches = _with_inputs(
        plan, settings, dry, on_nodes=backend.name != LOCAL, reader=reader
    )
    env.update(input_env)
    if backend.name == LOCAL and not dry and boxed is None:
        env[INGESTER_PID] = str(os.getpid())  # see ingester_here
    context = LaunchContext(
        experiment_id=exp_id,
        workdir=workdir,
        python=python,
        tracking_env=env,
        log_dir=str(settings.runs_dir / exp_id / "logs"),
        oversubscribe=oversubscribe,
        input_fetches=tuple(fetches),
        isolation=boxed,
    )
    recorded = {
        "file": str(Path(source).resolve()) if source else None,
        "params": {},
        **dict(launch or {}),
        "workdir": workdir,
        "cluster": cluster,
        "oversubscribe": oversubscribe,
    }
    if os.environ.get("PHALANX_SYSTEM_METRICS"):  # --no-system-metrics: `phalanx resume` keeps it
        recorded["system_metrics"] = os.environ["PHALANX_SYSTEM_METRICS"]
    if isolation is not None:  # a resume or rerun of it is boxed the same way
        recorded["isolation"] = isolation.to_json()
    return Prepared(exp_id, plan, backend, context, backend.dry_run(plan, context), cluster, recorded)


LOCAL = "local"


def _with_inputs(
    plan: Plan, settings: Settings, dry: bool, on_nodes: bool, reader: str | None = None
) -> tuple[Plan, dict[str, str], list[dict[str, Any]]]:
    """Resolve the plan's data inputs before anything starts (a missing dataset or datastore is a
    NotFound, exit 2), fetching downloads into this machine's cache; the plan then carries their
    lineage records (dataset versions, datastore URLs) and every replica their local paths.
    ``on_nodes`` (a cluster engine): downloads become fetch orders each node or pod carries out.
    ``reader``: a server's boxed run's project (its own and shared data only, its credentials)."""
    if not plan.inputs:
        return plan, {}, []
    from phalanx.data.inputs import resolve  # why: `inputs` only: the data catalog (issue 42)

    # a plan resolved before (read back from the store) names the exact versions it used
    specs = [i if not isinstance(i, Mapping) else from_record(i) for i in plan.inputs]
    orders: list[dict[str, Any]] | None = [] if on_nodes else None
    env, records = resolve(specs, settings, dry=dry, orders=orders, reader=reader)
    return replace(plan, inputs=tuple(records)), env, orders or []


def _shared_dir(cluster_conf: Cluster | None) -> Path | None:
    """A Slurm cluster's shared folder, where the venv and the SDK copy go so every node sees them
    (refused with how to register one when the cluster has none)."""
    if cluster_conf is None or cluster_conf.kind != "slurm":
        return None
    return Path(cluster_conf.slurm_shared_dir())


def ingester_here(prepared: Prepared) -> Prepared:
    """Local replicas get PHALANX_INGESTER_PID = this process (the supervisor, whose thread ingests
    their spool), so their ``flush()`` stops waiting at once if the supervisor dies instead of
    waiting out its timeout. Only for the local engine: on Slurm or Kubernetes a pid of this
    machine means nothing (there flush waits up to its timeout). ``prepare`` already sets it; this
    redoes the dry run only if the supervisor runs in another process than ``prepare`` did."""
    pid = str(os.getpid())
    env = prepared.context.tracking_env
    if prepared.backend.name != LOCAL or env.get(INGESTER_PID) == pid or prepared.context.isolation:
        return prepared  # (a box cannot see this machine's processes: it reports over HTTP)
    context = replace(prepared.context, tracking_env={**env, INGESTER_PID: pid})
    return replace(prepared, context=context, dry_run=prepared.backend.dry_run(prepared.plan, context))


def render_dry_run(prepared: Prepared) -> str:
    """What `phalanx run --dry-run` prints: per replica, the argv, working directory and environment
    (local engine), or the engine's own render (an sbatch script, Kubernetes YAML)."""
    dry = prepared.dry_run
    return dry.text() if isinstance(dry, LocalDryRun) else dry.render()


def launch_json(prepared: Prepared) -> dict[str, Any]:
    """How the experiment was launched, kept with its plan (`phalanx get`, the API): the file, the
    `--param` values given and the command each replica runs, params filled in and quoted."""
    plan = prepared.plan
    commands = {r.name: plan.command for r in plan.replicas}
    native = prepared.dry_run.native
    if isinstance(native, dict) and native.get("engine") == "local":
        for unit in native["units"]:
            argv = unit["processes"][0]["argv"]  # every process of a unit runs the same argv
            shown = argv[2] if argv[:2] == ["/bin/sh", "-c"] else shlex.join(argv)
            for name in unit["replicas"]:
                commands[name] = shown
    doc: dict[str, Any] = {"file": plan.source_file, "params": dict(plan.launch_params), "commands": commands}
    origin = (prepared.launch or {}).get("rerun_of")
    if origin:  # a rerun (`phalanx rerun`, the server's clone): the UI links to where it came from
        doc["rerun_of"] = origin
    return doc


def dry_run_json(prepared: Prepared) -> dict[str, Any]:
    dry = prepared.dry_run
    doc: dict[str, Any] = {
        "experiment_id": prepared.experiment_id,
        "backend": prepared.backend.name,
        "format": dry.format,
        "plan": prepared.plan.to_json(),
    }
    if isinstance(dry, LocalDryRun):
        doc["replicas"] = [u.to_json() for u in dry.units]
    else:
        native = dry.native
        doc["native"] = native if not isinstance(native, str) else None
        doc["render"] = dry.render()
    return doc


def replace_plan(prepared: Prepared, **changes: Any) -> Prepared:
    """A copy with some plan fields changed (tests, estimators); the dry run is redone."""
    plan = replace(prepared.plan, **changes)
    return replace(prepared, plan=plan, dry_run=prepared.backend.dry_run(plan, prepared.context))
