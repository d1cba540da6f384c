"""Plan -> sbatch script (pure): what `phalanx run --cluster NAME --dry-run` prints for a Slurm cluster.

Each process of each replica is one Slurm task. Replicas with the same resources share one job; when
they differ (per-index overrides) the job is heterogeneous, one component per distinct set of
resources, so every replica gets exactly what the file asked for. Hosts are not known before Slurm
allocates them, so the framework wiring (MASTER_ADDR, TF_CONFIG hosts, DMLC_PS_ROOT_URI) is computed
inside the job from the allocation: the script expands the node list task by task (block
distribution) and resolves each node's NodeAddr with `scontrol show node`. The values come from the
same `phalanx.frameworks` functions the local engine uses, rendered with shell expansions in place of
the hosts.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx import frameworks
from phalanx.backends.base import MACHINE_PATH
from phalanx.domain import Framework, Range, Resources, Role
from phalanx.errors import SpecError
from phalanx.frameworks import Endpoints, mpi, pytorch
from phalanx.plan import Plan, ReplicaPlan


@dataclass(frozen=True)
class SlurmResources:
    """What one task asks Slurm for.

    Resource mapping (Slurm reserves what a replica is guaranteed, so requests; limits only stand in
    where no request is given, because Slurm has no separate ceiling a task could burst to):
      cpu    -> --cpus-per-task (cores per process; a replica's cpus are split over its processes),
                and OMP_NUM_THREADS (TF_NUM_INTRAOP_THREADS too) = the task's cores
      memory -> --mem-per-cpu, so that cpus-per-task x mem-per-cpu = the replica's MiB (Slurm's --mem
                is per node and would be shared by tasks packed on one node); GPU replicas own whole
                nodes and get --mem
      gpu    -> --gres=gpu:N with --ntasks-per-node = processes per replica (GPU replicas one per node)
    """

    cpus: int
    memory_mib: int | None
    gpus: int
    tasks_per_node: int | None

    def options(self, ntasks: int) -> list[str]:
        opts = [f"--ntasks={ntasks}", f"--cpus-per-task={self.cpus}"]
        if self.gpus:
            opts += [f"--ntasks-per-node={self.tasks_per_node}", f"--gres=gpu:{self.gpus}"]
            if self.memory_mib:
                opts.append(f"--mem={self.memory_mib}")
        elif self.memory_mib:
            opts.append(f"--mem-per-cpu={math.ceil(self.memory_mib / self.cpus)}")
        return opts


def _amount(r: Resources, key: str) -> float | None:
    """The request (what the scheduler reserves); the limit only when no request is given."""
    rng: Range = getattr(r, key)
    return rng.requests if rng.requests is not None else rng.limits


def slurm_resources(replica: ReplicaPlan) -> SlurmResources:
    k = replica.processes
    cpu = _amount(replica.resources, "cpu")
    mem = _amount(replica.resources, "memory")
    gpu = _amount(replica.resources, "gpu")
    gpus = math.ceil(gpu) if gpu else 0
    cpus = max(1, math.ceil(cpu / k)) if cpu else 1
    if gpus:
        return SlurmResources(
            cpus=cpus, memory_mib=math.ceil(mem) if mem else None, gpus=gpus, tasks_per_node=k
        )
    per_task_mem = math.ceil(mem / k) if mem else None
    return SlurmResources(cpus=cpus, memory_mib=per_task_mem, gpus=0, tasks_per_node=None)


@dataclass(frozen=True)
class Task:
    """One Slurm task: process ``local_rank`` of ``replica``. ``key`` names its log and state files."""

    index: int
    replica: ReplicaPlan
    local_rank: int

    @property
    def key(self) -> str:
        return self.replica.name if self.local_rank == 0 else f"{self.replica.name}.{self.local_rank}"


@dataclass(frozen=True)
class Component:
    resources: SlurmResources
    tasks: tuple[Task, ...]


def layout(plan: Plan) -> list[Component]:
    """Tasks grouped into job components by identical resources, in the plan's order (master first)."""
    groups: dict[SlurmResources, list[tuple[ReplicaPlan, int]]] = {}
    for replica in plan.replicas:
        res = slurm_resources(replica)
        for j in range(replica.processes):
            groups.setdefault(res, []).append((replica, j))
    components: list[Component] = []
    n = 0
    for res, members in groups.items():
        tasks = []
        for replica, j in members:
            tasks.append(Task(n, replica, j))
            n += 1
        components.append(Component(res, tuple(tasks)))
    return components


PORTS_FROM = 20000  # the first of the ranges, each PORTS_PER_JOB ports wide
PORTS_PER_JOB = 16
PORT_RANGES = 768  # ranges end at 32288: below Linux's ephemeral ports (32768-60999), which the
# kernel hands to any outgoing connection on the node; a master port there was taken at times (a DDP
# master's EADDRINUSE on the loopback test cluster)


def base_port(experiment_id: str) -> int:
    """A deterministic port range per experiment (tasks add their index), so renders are stable."""
    try:
        seed = int(experiment_id[:6], 16)
    except ValueError:
        seed = sum(experiment_id.encode())
    return PORTS_FROM + (seed % PORT_RANGES) * PORTS_PER_JOB


_ADDR = re.compile(r"@@ADDR(\d+)@@")


def _bash_value(value: str) -> str:
    """A double-quoted shell word: literal text, with @@ADDRn@@ placeholders as ${ADDR[n]}."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    return '"' + _ADDR.sub(lambda m: "${ADDR[" + m.group(1) + "]}", escaped) + '"'


def _exports(env: Mapping[str, str], indent: str) -> list[str]:
    return [f"{indent}export {k}={_bash_value(v)}" for k, v in env.items()]


TOKEN_VARIABLE = "PHALANX_TOKEN"  # the experiment's token: from TOKEN_FILE, which the submit writes 0600
TOKEN_FILE = "token"  # <run dir>/token: not in the script, which Slurm's accounting stores and shows

SIGNAL_SECONDS = 60  # Slurm sends --signal with a resolution of about a minute anyway

# A requeued job (node failure, preemption) starts again in the same run folder: the last attempt's
# logs and state move under attempts/<n>/ (n continues the numbering the engine's restarts use), so
# nothing is read twice and the new attempt starts clean. PHALANX_ATTEMPT tells the tasks.
REQUEUE = r"""
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && [ -d "$PHALANX_RUN_DIR/logs" ]; then
  mkdir -p "$PHALANX_RUN_DIR/attempts"
  n=$(find "$PHALANX_RUN_DIR/attempts" -mindepth 1 -maxdepth 1 -type d | wc -l)
  mkdir "$PHALANX_RUN_DIR/attempts/$n"
  for f in logs state cancelled; do
    [ -e "$PHALANX_RUN_DIR/$f" ] && mv "$PHALANX_RUN_DIR/$f" "$PHALANX_RUN_DIR/attempts/$n/"
  done
fi
PHALANX_ATTEMPT=$(find "$PHALANX_RUN_DIR/attempts" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
export PHALANX_ATTEMPT
""".strip("\n")

_NAME_OK = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

TASK_NODES = r"""
# One node per task, in task order: Slurm's node list expanded by its tasks-per-node ("2(x3),1").
phalanx_task_nodes() {
  local nodes i=0 part count reps r c
  read -ra nodes <<<"$(scontrol show hostnames "$1" | tr '\n' ' ')"
  IFS=, read -ra parts <<<"$2"
  for part in "${parts[@]}"; do
    if [[ $part =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then count=${BASH_REMATCH[1]}; reps=${BASH_REMATCH[2]};
    else count=$part; reps=1; fi
    for ((r = 0; r < reps; r++)); do
      for ((c = 0; c < count; c++)); do echo "${nodes[$i]}"; done
      i=$((i + 1))
    done
  done
}
NODES=()
if [ -n "${SLURM_HET_SIZE:-}" ]; then
  for ((g = 0; g < SLURM_HET_SIZE; g++)); do
    list=SLURM_JOB_NODELIST_HET_GROUP_$g; per=SLURM_TASKS_PER_NODE_HET_GROUP_$g
    mapfile -t -O "${#NODES[@]}" NODES < <(phalanx_task_nodes "${!list}" "${!per}")
  done
else
  mapfile -t NODES < <(phalanx_task_nodes "$SLURM_JOB_NODELIST" "$SLURM_TASKS_PER_NODE")
fi
# Each node's address (NodeAddr; it defaults to the node's name on most clusters).
declare -A NODE_ADDR
for n in "${NODES[@]}"; do
  [ -n "${NODE_ADDR[$n]:-}" ] ||
    NODE_ADDR[$n]=$(scontrol show node -o "$n" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
done
ADDR=(); for n in "${NODES[@]}"; do ADDR+=("${NODE_ADDR[$n]:-$n}"); done
export PHALANX_TASK_NODES="${NODES[*]}" PHALANX_TASK_ADDRS="${ADDR[*]}"
""".strip("\n")

TASK_RUNNER = r"""
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
STATE="$PHALANX_RUN_DIR/state/$KEY"
echo "$SLURMD_NODENAME" >"$STATE.node"
# its own process group: `sh -c` need not exec, and stopping the command must stop its python too
# (an orphaned TensorFlow server would outlive the job: proctrack/linuxproc loses reparented processes)
setsid /bin/sh -c "$PHALANX_COMMAND" >"$PHALANX_RUN_DIR/logs/$KEY.log" 2>&1 </dev/null &
child=$!
# system/... series of this replica's process tree, sampled beside it (docs/checkpoints.md)
sampler=
if [ "${PHALANX_SYSTEM_METRICS:-}" != off ]; then
  python -m phalanx.machine.sysmetrics --pid "$child" >/dev/null 2>&1 </dev/null & sampler=$!
fi
stopped=0
code=
stop_tree() {
  kill -TERM -- "-$child" 2>/dev/null
  wait "$child" 2>/dev/null; code=$?
  for _ in $(seq 40); do kill -0 -- "-$child" 2>/dev/null || return 0; sleep 0.25; done
  kill -KILL -- "-$child" 2>/dev/null
}
trap 'stopped=1; stop_tree' TERM INT
while kill -0 "$child" 2>/dev/null; do
  if [ "$STOP_AFTER_MASTER" = 1 ] && [ "$(cat "$PHALANX_RUN_DIR/state/master.exit" 2>/dev/null)" = 0 ]; then
    # the chief has finished: this server never exits by itself, stopping it is success
    stop_tree; echo 0 >"$STATE.exit"; exit 0
  fi
  sleep 1 & wait $! 2>/dev/null
done
if [ -z "$code" ]; then wait "$child"; code=$?; fi
if [ "$stopped" = 0 ] && [ "$code" -gt 128 ] && [ "$code" -le 143 ]; then
  # killed by a signal: on scancel or a requeue Slurm signals this script too, maybe a moment
  # later on a busy node; wait for it so a requeued or cancelled task reads "stopped", not failed
  killed=$code; sleep 2 & wait $! 2>/dev/null; code=$killed
fi
kill -KILL -- "-$child" 2>/dev/null  # whatever the command left behind in its group
[ -n "$sampler" ] && kill "$sampler" 2>/dev/null
if [ "$stopped" = 1 ]; then echo stopped >"$STATE.exit.tmp"; else echo "$code" >"$STATE.exit.tmp"; fi
mv "$STATE.exit.tmp" "$STATE.exit"
exit "$code"
""".strip("\n")


# Each task first makes sure its node holds the data inputs (phalanx.data.nodefetch): fetched into
# the node's own cache once, whichever task of the node comes first (the cache's file lock), then
# PHALANX_INPUT_<NAME> points there. A missing or changed file fails the task (exit 2) before the
# command starts, with the reason in its log.
FETCH_STEP = r"""
fetch_code=0
fetched=$(PYTHONPATH=@@PATH@@ @@PYTHON@@ -m phalanx.data.nodefetch "$PHALANX_RUN_DIR/inputs.json" \
  2>>"$PHALANX_RUN_DIR/logs/$KEY.log") || fetch_code=$?
if [ "$fetch_code" != 0 ]; then
  echo "$SLURMD_NODENAME" >"$PHALANX_RUN_DIR/state/$KEY.node"
  echo "$fetch_code" >"$PHALANX_RUN_DIR/state/$KEY.exit.tmp"
  mv "$PHALANX_RUN_DIR/state/$KEY.exit.tmp" "$PHALANX_RUN_DIR/state/$KEY.exit"
  exit "$fetch_code"
fi
eval "$fetched"
""".strip("\n")


@dataclass(frozen=True)
class NodeFetch:
    """The data inputs every node fetches for itself, and the Phalanx that fetches them: this
    interpreter and package folder (on a cluster, at the same path on every node, as the venvs)."""

    orders: tuple[Mapping[str, Any], ...]
    python: str
    pythonpath: str
    cache: str | None = None  # PHALANX_NODE_CACHE ("%n": the node's name); None: the node's default

    def header(self) -> list[str]:
        lines = [
            "# Data inputs: each node fetches these files into its own cache (with its own credentials;",
            "# no secret is written here) before its replicas start.",
            "cat >\"$PHALANX_RUN_DIR/inputs.json\" <<'PHALANX_INPUTS'",
            json.dumps(list(self.orders), sort_keys=True),
            "PHALANX_INPUTS",
        ]
        if self.cache:
            lines.append(f"export PHALANX_NODE_CACHE={shlex.quote(self.cache)}")
        return lines

    def step(self) -> str:
        return FETCH_STEP.replace("@@PATH@@", shlex.quote(self.pythonpath)).replace(
            "@@PYTHON@@", shlex.quote(self.python)
        )


def _task_case(plan: Plan, task: Task, endpoints: Endpoints, experiment_id: str) -> list[str]:
    r = task.replica
    env = frameworks.phalanx_env(experiment_id, r, {}, plan.params)
    if frameworks.uses_mpi(plan):
        env.update(pytorch.env(plan, r, endpoints, task.local_rank))
    else:
        env.update(frameworks.framework_env(plan, r, endpoints, task.local_rank))
    stop = plan.framework is Framework.TENSORFLOW and r.role is not Role.MASTER and plan.topology()["ps"] > 0
    threads = slurm_resources(r).cpus
    env.update(frameworks.thread_env(plan, threads))  # TensorFlow's pools (one inter-op thread hangs)
    lines = [
        f"  {task.index})",
        f"    KEY={shlex.quote(task.key)} STOP_AFTER_MASTER={int(stop)} THREADS={threads}",
    ]
    lines += _exports(env, "    ")
    lines.append("    ;;")
    return lines


def render(
    plan: Plan,
    experiment_id: str,
    workdir: str,
    run_dir: Path,
    env: Mapping[str, str],
    partition: str | None = None,
    mpi_plugin: str = "pmix",
    account: str | None = None,
    node_fetch: NodeFetch | None = None,
) -> str:
    """The complete sbatch script. ``env`` is what every replica shares (tracking, plan.env, PATH).

    The script is self-contained: it creates its run folder and writes what the engine reads back, so
    the dry run is exactly what is submitted and `sbatch` of a saved copy works by hand. Tasks get
    only the environment written here (``--export=NONE``), not the submitting shell's.
    """
    _check_renderable(plan, env)
    components = layout(plan)
    tasks = [t for c in components for t in c.tasks]
    first_task = {t.replica.name: t.index for t in tasks if t.local_rank == 0}
    fetch = node_fetch if node_fetch and node_fetch.orders else None
    lines = _sbatch_header(plan, experiment_id, workdir, components, first_task, partition, account)
    lines += _shared_setup(plan, run_dir, tasks, env, fetch)
    lines += _task_script(plan, experiment_id, tasks, first_task, fetch)
    lines += [_srun(plan, components, mpi_plugin), "exit $?", ""]
    return "\n".join(lines)


def _check_renderable(plan: Plan, env: Mapping[str, str]) -> None:
    """Refuse what Slurm's shell or MPI cannot run before a line of the script is written."""
    if frameworks.uses_mpi(plan):
        problems = mpi.check(plan)
        if problems:
            raise SpecError(problems[0])
    for key in env:
        if not _NAME_OK.match(key):
            raise SpecError(f"env: {key!r} is not a valid environment variable name for Slurm's shell")


def _sbatch_header(
    plan: Plan,
    experiment_id: str,
    workdir: str,
    components: Sequence[Component],
    first_task: Mapping[str, int],
    partition: str | None,
    account: str | None,
) -> list[str]:
    """The #SBATCH lines: the job's name, folder, limits, requeue policy and each component's resources."""
    tasks = [t for c in components for t in c.tasks]
    shape = (
        f"a heterogeneous job of {len(components)} components (replicas' resources differ)"
        if len(components) > 1
        else f"one job of {len(tasks)} task(s)"
    )
    lines = [
        "#!/bin/bash",
        f"# Phalanx experiment {experiment_id} ({plan.name}): {len(plan.replicas)} replica(s) as {shape}.",
        "# Each replica's processes are Slurm tasks; one failing stops them all (--kill-on-bad-exit).",
        f"#SBATCH --job-name=phalanx-{experiment_id}",
        f"#SBATCH --chdir={_sbatch_value(workdir)}",
        "# the run folder may not exist yet: the script creates it and sends its own output there",
        "#SBATCH --output=/dev/null",
        "# only what this script exports reaches the tasks, not the submitting shell's environment",
        "#SBATCH --export=NONE",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if account:
        lines.append(f"#SBATCH --account={account}")
    lines += _time_limit(plan)
    lines.append("# replicas are machines in the file's terms: spread the tasks over as many nodes as it can")
    lines.append("#SBATCH --spread-job")
    if plan.max_restarts:
        lines.append("# requeued after a node failure or preemption (attempts keep counting)")
        lines.append("#SBATCH --requeue")
    else:
        lines.append("#SBATCH --no-requeue")
    for n, comp in enumerate(components):
        if n:
            lines.append("#SBATCH hetjob")
        names = sorted({t.replica.name for t in comp.tasks}, key=lambda s: first_task[s])
        first, last = comp.tasks[0].index, comp.tasks[-1].index
        span = f"task {first}" if first == last else f"tasks {first}-{last}"
        lines.append(f"# {span}: {', '.join(names)}")
        lines += [f"#SBATCH {opt}" for opt in comp.resources.options(len(comp.tasks))]
    return lines


def _time_limit(plan: Plan) -> list[str]:
    """The job's --time from max_run_seconds, with a SIGTERM early enough for a checkpoint."""
    if not plan.max_run_seconds:
        return []
    minutes = max(1, math.ceil(plan.max_run_seconds / 60))
    lines = [f"#SBATCH --time={minutes}"]
    if minutes > 2 * SIGNAL_SECONDS // 60:  # a shorter limit would be signalled right at the start
        lines += [
            f"# SIGTERM {SIGNAL_SECONDS} s before the time limit, so the tasks can write a checkpoint",
            f"#SBATCH --signal=TERM@{SIGNAL_SECONDS}",
        ]
    return lines


def _shared_setup(
    plan: Plan, run_dir: Path, tasks: Sequence[Task], env: Mapping[str, str], fetch: NodeFetch | None
) -> list[str]:
    """The script's body before the tasks: run folder, task list, base and shared environment, inputs."""
    lines = [
        "",
        "set -uo pipefail",
        f"export PHALANX_RUN_DIR={shlex.quote(str(run_dir))}",
        REQUEUE,
        'mkdir -p "$PHALANX_RUN_DIR/logs" "$PHALANX_RUN_DIR/state"',
        'exec >>"$PHALANX_RUN_DIR/slurm-$SLURM_JOB_ID.out" 2>&1',
        "# the tasks, one per line (the engine reads their state files; its submit wrote them already)",
        '[ -e "$PHALANX_RUN_DIR/tasks" ] || cat >"$PHALANX_RUN_DIR/tasks" <<\'PHALANX_TASKS\'',
        *[t.key for t in tasks],
        "PHALANX_TASKS",
        "",
        "# A minimal base environment (--export=NONE gave the script only SLURM_* variables).",
        'export HOME="${HOME:-$(getent passwd "$(id -un)" | cut -d: -f6)}" USER="${USER:-$(id -un)}"',
        "export LANG=C.UTF-8 PATH=/usr/local/bin:/usr/bin:/bin",
        "",
        "# What every replica shares: tracking, the file's env, the experiment's interpreter first on PATH.",
    ]
    for k, v in env.items():
        if k != TOKEN_VARIABLE:
            lines.append(f"export {k}={shlex.quote(v) if k != 'PATH' else _path_value(v)}")
    if TOKEN_VARIABLE in env:  # the token's own file, never the script: slurmdbd keeps job scripts
        lines += [
            f'{TOKEN_VARIABLE}=$(<"$PHALANX_RUN_DIR/{TOKEN_FILE}") || {{',
            f'  echo "phalanx: no token in $PHALANX_RUN_DIR/{TOKEN_FILE} (the submit writes it, 0600)" >&2',
            "  exit 1",
            "}",
            f"export {TOKEN_VARIABLE}",
        ]
    lines.append(f"export PHALANX_COMMAND={shlex.quote(plan.command)}")
    if fetch:
        lines += ["", *fetch.header()]
    return lines


def _task_script(
    plan: Plan,
    experiment_id: str,
    tasks: Sequence[Task],
    first_task: Mapping[str, int],
    fetch: NodeFetch | None,
) -> list[str]:
    """task.sh, which every Slurm task runs: its replica's wiring by task number, then the runner."""
    port = base_port(experiment_id)
    endpoints = Endpoints(
        hosts={name: f"@@ADDR{i}@@" for name, i in first_task.items()},
        ports={name: port + i for name, i in first_task.items()},
    )
    lines = [
        "",
        TASK_NODES,
        "",
        "# Each task names its replica and computes its wiring from the allocation (ADDR[task]).",
        "cat >\"$PHALANX_RUN_DIR/task.sh\" <<'PHALANX_TASK'",
        "set -u",
        'read -ra ADDR <<<"$PHALANX_TASK_ADDRS"',
        'case "$SLURM_PROCID" in',
    ]
    for task in tasks:
        lines += _task_case(plan, task, endpoints, experiment_id)
    lines += ['  *) echo "phalanx: unexpected task $SLURM_PROCID" >&2; exit 3 ;;', "esac"]
    if fetch:
        lines.append(fetch.step())
    lines.append(TASK_RUNNER)
    lines += ["PHALANX_TASK", ""]
    return lines


def _srun(plan: Plan, components: Sequence[Component], mpi_plugin: str) -> str:
    """The one srun step that starts every task (one het group per component when resources differ)."""
    srun = ["srun"]
    if len(components) > 1:
        srun.append(f"--het-group=0-{len(components) - 1}")
    # --export=ALL: the step takes this script's environment (sbatch's NONE would otherwise carry over)
    srun += ["--export=ALL", "--kill-on-bad-exit=1", "--distribution=block"]
    if frameworks.uses_mpi(plan):
        srun.append(f"--mpi={mpi_plugin}")
    srun += ["/bin/bash", '"$PHALANX_RUN_DIR/task.sh"']
    return " ".join(srun)


def _sbatch_value(value: str) -> str:
    """#SBATCH lines are split on blanks; sbatch honours double quotes around a value."""
    if '"' in value or "\n" in value:
        raise SpecError(f"{value!r}: a path for Slurm cannot contain double quotes or newlines")
    return f'"{value}"' if any(c.isspace() for c in value) else value


def _path_value(value: str) -> str:
    """PATH keeps the node's own PATH after the interpreter's folder: each ``$PATH`` or ``${PATH}``
    in it is the node's, the rest literal (what follows one kept too, as the local engine does)."""
    return '"$PATH"'.join(shlex.quote(part) if part else "" for part in MACHINE_PATH.split(value))
