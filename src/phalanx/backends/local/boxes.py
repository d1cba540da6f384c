"""The local engine's side of a box (phalanx.machine.box): what each unit's box sees, the folders
it writes, its cgroup, and the environment it starts from.

A boxed unit's processes get no environment of the supervisor's (which is the server's: its AWS
credentials, its token, PHALANX_HOME): the unit's config holds everything Phalanx sets, and the
reaper adds, by name only, the locale and the project's secrets the supervisor handed over
(``SECRET_NAMES``), so their values are written in no file. Reporting goes over HTTP
(supervisor.preparing.boxed_tracking_env); the console is read from pipes by the reaper, as for any
unit.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from phalanx.backends.base import LaunchContext
from phalanx.machine import box, cgroups
from phalanx.machine.box import Isolation
from phalanx.machine.limits import ReplicaLimits
from phalanx.machine.proctree import MIB
from phalanx.plan import Plan

# the names (never the values) of the secrets the supervisor put in its environment for this submit
SECRET_NAMES = "PHALANX_SECRET_NAMES"
# where Phalanx's own code lives (the reaper boots from it; an SDK import in the box needs it)
PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
SHM_ROOT = Path("/dev/shm")


def shm_folder(experiment_id: str, home: Path) -> Path:
    """The experiment's /dev/shm (shared by its replicas, as NCCL's shared-memory transport needs,
    and by no other experiment): on the machine's tmpfs when there is one."""
    if SHM_ROOT.is_dir():
        return SHM_ROOT / f"phalanx-{experiment_id}"
    return box.box_folder(home, experiment_id) / "shm"


def base_env(plan: Plan, context: LaunchContext, home: Path) -> dict[str, str]:
    """Every boxed process's environment before the framework's wiring: the box's own (PATH with
    the experiment's interpreter first, a home in its folder), the plan's and build's variables,
    and the SDK copy importable."""
    iso = context.isolation
    assert iso is not None
    folder = box.box_folder(home, context.experiment_id)
    env = box.box_env(iso, str(folder / "home"), [str(Path(context.python).parent)])
    env.update({**plan.build.env_vars, **plan.env})
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[box.ENV_BOX] = str(folder)
    # the SDK copy for a foreign venv; else the very Phalanx the supervisor runs (as an unboxed
    # replica gets it through the PYTHONPATH it inherits)
    sdk = context.tracking_env.get("PYTHONPATH") or PACKAGE_ROOT
    env["PYTHONPATH"] = os.pathsep.join(p for p in (sdk, env.get("PYTHONPATH", "")) if p)
    return env


def read_only(context: LaunchContext) -> tuple[str, ...]:
    """What a box reads of this machine beyond its libraries: the interpreters, Phalanx's code,
    the SDK copy, its inputs and the checkpoint it resumes from (each at its own path)."""
    env = context.tracking_env
    paths = [*box.interpreter_trees(context.python), PACKAGE_ROOT]
    paths += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths += [v for k, v in env.items() if k.startswith("PHALANX_INPUT_") and v.startswith("/")]
    resume = env.get("PHALANX_RESUME_CHECKPOINT")
    if resume:
        paths.append(resume)
    return tuple(paths)


def unit_argv(context: LaunchContext, home: Path, unit: str, limits: ReplicaLimits) -> list[str]:
    """The argv prefix that starts one unit's processes in its box."""
    iso = context.isolation
    assert iso is not None
    folder = box.box_folder(home, context.experiment_id)
    layout = box.Layout(
        cwd=context.workdir,
        tmp=str(folder / "tmp" / unit),
        rw=(context.workdir, str(folder)),
        ro=read_only(context),
        shm=str(shm_folder(context.experiment_id, home)),
        devices=box.gpu_nodes(limits.gpus or ()),
    )
    return box.box_argv(iso, layout)


def helper_argv(context: LaunchContext) -> list[str]:
    """The box that root's look at a boxed experiment's folder runs git and its interpreter in
    (repro: what it runs): that folder and the interpreter read-only, nothing written. Empty for
    an experiment that is not boxed."""
    if context.isolation is None:
        return []
    ro = (context.workdir, *box.interpreter_trees(context.python))
    return box.box_argv(context.isolation, box.Layout(cwd=context.workdir, tmp=None, ro=ro))


def prepare(iso: Isolation, context: LaunchContext, home: Path, units: Iterable[str]) -> None:
    """Before a boxed attempt starts: its folders made fresh (or checked) as the box's account's,
    and the experiment's folder (unpacked by root) given to that account without following links."""
    folder = box.make_own_folder(box.box_folder(home, context.experiment_id), iso)
    for sub in ("spool", "home", "tmp"):
        box.make_own_folder(folder / sub, iso)
    for unit in units:
        box.make_own_folder(folder / "tmp" / unit, iso)
    box.make_own_folder(shm_folder(context.experiment_id, home), iso)
    box.hand_over(Path(context.workdir), iso)


def cgroup_for(name: str, iso: Isolation, limits: Mapping[str, Any]) -> cgroups.Cgroup | None:
    """The unit's cgroup with its memory, cores and process-count limits (None: none writable)."""
    memory = float(limits["memory"][:-2]) if limits.get("memory") else None
    cpus = len(limits["cpus"]) if limits.get("cpus") else None
    with contextlib.suppress(OSError):
        return cgroups.Cgroup.create(
            name, memory_bytes=int(memory * MIB) if memory else None, cpus=cpus, pids_max=iso.pids_max
        )
    return None


def reaper_config(iso: Isolation, argv: list[str], cgroup: cgroups.Cgroup | None) -> dict[str, Any]:
    """The ``box`` part of a unit's reaper config: names only, never a secret's value."""
    secrets = [n for n in os.environ.get(SECRET_NAMES, "").split(",") if n]
    return {
        "argv": box.with_cgroup(argv, cgroup.folders) if cgroup else argv,  # its own cgroup, read-only
        "inherit": [*box.INHERITED, *secrets],
        "uid": iso.uid,
        "gid": iso.gid,
        "cgroup": list(cgroup.folders) if cgroup else [],
        "v2": bool(cgroup and cgroup.v2),
    }


def reaper_start(
    config: Mapping[str, Any], replica_env: Mapping[str, str], mark: Mapping[str, str]
) -> tuple[dict[str, str], IO[bytes]]:
    """The environment and standard input a unit's reaper starts with. Unboxed: this process's
    environment and the replica's, nothing to read. Boxed, the reaper runs as root, so no value a
    project's admin chose (its secrets: ``phalanx secret set``) is in its environment, where the
    loader would honour one named LD_PRELOAD: it reads them as JSON from its standard input (an
    unlinked file) and hands them to its box (phalanx.machine.handoff)."""
    boxed = config.get("box")
    if boxed is None:
        return {**os.environ, **replica_env}, open(os.devnull, "rb")
    secrets = [n for n in boxed["inherit"] if n not in box.INHERITED]
    held = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it once the reaper started)
    held.write(json.dumps({n: os.environ[n] for n in secrets if n in os.environ}).encode())
    held.flush()
    held.seek(0)
    return {**{k: v for k, v in os.environ.items() if k not in secrets}, **mark}, held


def procs(folders: Iterable[str], v2: bool = False) -> list[int]:
    """The live processes of a unit's cgroup (its recorded folders)."""
    found = tuple(folders)
    return cgroups.Cgroup(found, v2).procs() if found else []


def finish(experiment_id: str, home: Path, cgroup_folders: Iterable[tuple[tuple[str, ...], bool]]) -> None:
    """Once none of an attempt's processes runs: its cgroups, the experiment's /dev/shm and its
    boxes' /tmp go (the spool stays: what it holds unshipped goes with the next attempt)."""
    for folders, v2 in cgroup_folders:
        group = cgroups.Cgroup(folders, v2)
        group.kill()
        group.remove()
    shm = shm_folder(experiment_id, home)
    if shm.parent == SHM_ROOT:
        shutil.rmtree(shm, ignore_errors=True)  # fd-based: never follows the box's links
    shutil.rmtree(box.box_folder(home, experiment_id) / "tmp", ignore_errors=True)
