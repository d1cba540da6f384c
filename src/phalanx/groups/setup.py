"""Before a group's controller runs: check that its trials can run, build their environment once,
record the group, and read a recorded group's file back (``load``)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from phalanx import buildenv
from phalanx.config import Settings
from phalanx.domain import Framework, Group
from phalanx.errors import SpecError, UsageError
from phalanx.machine.box import Isolation
from phalanx.plan import build_plan
from phalanx.spec.group import GroupSpec, example_values
from phalanx.spec.model import Build, ExperimentSpec
from phalanx.store.base import GroupStore


def create(
    store: GroupStore,
    group: GroupSpec,
    *,
    workdir: Path | None,
    params: dict[str, Any] | None = None,
    cluster: str | None = None,
    oversubscribe: bool = False,
    allow_unused: bool = False,
    extra_params: bool = False,
    isolation: Isolation | None = None,
) -> Group:
    """Record a new group (status created); ``Controller(...).run()`` then runs it. ``isolation``:
    its trials run boxed (a server's submission), kept in its options for every later controller."""
    base = group.base
    source = Path(base.source_file) if base.source_file else None
    name = base.name or (source.stem if source else "group")
    hp = group.hptuning
    return store.create_group(
        name=name,
        project=base.project or "default",
        search=hp.search.kind,
        planned=hp.planned_trials(),
        concurrency=hp.concurrency,
        metric=hp.metric.name if hp.metric else None,
        optimization=hp.metric.optimization if hp.metric else None,
        spec_text=base.source_text or "",
        source_file=str(source) if source else None,
        workdir=str((workdir or (source.parent if source else Path.cwd())).resolve()),
        options={
            "params": dict(params or {}),
            "cluster": cluster,
            "oversubscribe": oversubscribe,
            "allow_unused": allow_unused,
            "extra_params": extra_params,
            "isolation": isolation.to_json() if isolation else None,
        },
    )


def check_trials_can_run(
    group: GroupSpec,
    settings: Settings,
    *,
    cluster: str,
    workdir: Path | None,
    oversubscribe: bool = False,
    isolation: Isolation | None = None,
) -> None:
    """Before a group on a cluster is recorded: prepare one trial (the example values `phalanx
    check` shows) as its `phalanx run` would, without building or starting anything, and ask the
    engine whether it could ever run it (Slurm: ``sbatch --test-only``). A search whose every trial
    Slurm would refuse is a UsageError here (exit 2, nothing recorded), not N failed trials.
    ``isolation``: a server's group, prepared boxed as its trials will be (its files read as the
    box's are, never through a link; Ray refuses it)."""
    from phalanx.supervisor.preparing import prepare  # why: `phalanx group ls|get`: no supervisor

    values = example_values(group)
    spec = group.trial_spec(values)  # (--param overrides are in the group's params already)
    source = group.base.source_file
    try:
        prepared = prepare(
            spec,
            settings=settings,
            workdir=workdir or (Path(source).parent if source else None),
            cluster=cluster,
            oversubscribe=oversubscribe,
            dry=True,
            isolation=isolation,
        )
        prepared.backend.refuse_if_it_can_never_run(prepared.dry_run)
    except UsageError as exc:
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        raise UsageError(
            f"{source or 'the group'}: its trials cannot run (a trial with {shown}): {exc}"
        ) from None


def trial_build(spec: ExperimentSpec, base_dir: Path) -> Build:
    """A trial's build section with its files named from the group file's folder (the trial's own
    file lives under PHALANX_HOME/groups/ID)."""
    build = spec.build
    if build.requirements and not Path(build.requirements).is_absolute():
        build = replace(build, requirements=str(base_dir / build.requirements))
    if build.dockerfile and not Path(build.dockerfile).is_absolute():
        build = replace(build, dockerfile=str(base_dir / build.dockerfile))
    return build


def build_trials_env(
    group: GroupSpec, settings: Settings, *, workdir: Path | None, isolation: Isolation | None = None
) -> None:
    """Before a group on this machine is recorded: build the trials' environment (their `build`
    section, the same for every trial) once. A build that fails is a UsageError here (exit 2,
    nothing recorded), not every trial building it again in turn and failing the same way; one
    that succeeds is cached, so the trials start at once instead of queueing on its lock."""
    from phalanx.supervisor.preparing import interpreter  # why: `phalanx group ls|get`: no supervisor

    source = group.base.source_file
    base_dir = Path(source).parent if source else Path.cwd()
    spec = group.trial_spec(example_values(group))
    spec = replace(spec, build=trial_build(spec, base_dir))
    if not buildenv.wants_env(spec.build) and spec.framework is not Framework.HOROVOD:
        return
    folder = str((workdir or base_dir).resolve())
    try:
        plan = build_plan(spec)
        sys.stderr.write("phalanx: building the trials' environment (once, for every trial) ...\n")
        interpreter(plan, folder, settings, isolation=isolation)
    except SpecError:
        return  # the trial's own launch says what is wrong with it, as before
    except UsageError as exc:
        raise UsageError(f"{source or 'the group'}: the trials' environment cannot be built: {exc}") from None
