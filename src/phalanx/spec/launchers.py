"""A launcher in ``run.cmd`` (``torchrun``, ``accelerate launch``) wired to the replica's rendezvous.

With ``framework: pytorch`` every replica is a node of the job and already gets torchrun's variables
(MASTER_ADDR, MASTER_PORT, NODE_RANK). A command that starts a launcher itself would otherwise run a
one-node job per replica (torchrun's defaults: ``--nnodes=1 --node_rank=0``, port 29500), so Phalanx
inserts the launcher's rendezvous flags right after its name, reading the replica's own variables
(the same command text serves every replica, on every engine, and ``--dry-run`` shows it; the
Kubeflow PyTorchJob operator sets PET_NODE_RANK rather than NODE_RANK, hence the fallback):

    torchrun --nproc_per_node=1 train.py
    -> torchrun --nnodes=2 --node_rank="${NODE_RANK:-$PET_NODE_RANK}"
       --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" --nproc_per_node=1 train.py

The launcher then starts the node's processes (its ``--nproc_per_node``, or ``--num_processes`` in
total for accelerate), so Phalanx starts exactly one launcher per replica: ``processes_per_replica``
above 1 would start it twice and is refused, as is a rendezvous flag written in the command (it would
override the wiring). Pure text work; docs/integrations.md.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from phalanx.errors import SpecError

# a launcher at the start of a shell command: the text's start, or after ; & | ( (and env assignments)
_LAUNCHER = re.compile(
    r"(?:^|(?<=[;&|(]))\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*"
    r"(?P<name>torchrun|python3?(?:\.\d+)?\s+-m\s+torch\.distributed\.run|accelerate\s+launch)(?=\s|$)"
)
_OPERATOR = re.compile(r"&&|\|\||[;|)]")

TORCHRUN_RENDEZVOUS = (
    "nnodes", "node_rank", "master_addr", "master_port", "rdzv_endpoint", "rdzv_backend", "rdzv_id",
    "standalone",
)  # fmt: skip
ACCELERATE_RENDEZVOUS = ("num_machines", "machine_rank", "main_process_ip", "main_process_port")
NODE = '"${NODE_RANK:-$PET_NODE_RANK}"'  # the replica's node rank (a PyTorchJob pod sets only PET_)
RENDEZVOUS = '--{addr}="$MASTER_ADDR" --{port}="$MASTER_PORT"'


@dataclass(frozen=True)
class Wiring:
    """The rewritten command and what was done to it (``phalanx check`` prints ``note``)."""

    command: str
    note: str | None


def wire(command: str, nodes: int, processes_per_replica: int) -> Wiring:
    """Insert the rendezvous of ``nodes`` replicas after each launcher in ``command``; SpecError for a
    launcher that would be started twice per replica or whose command sets the rendezvous itself."""
    matches = list(_LAUNCHER.finditer(command))
    if not matches:
        return Wiring(command, None)
    problems: list[str] = []
    out: list[str] = []
    done = 0
    inserted: list[str] = []
    for match in matches:
        name = " ".join(match.group("name").split())
        launcher = "accelerate launch" if name.startswith("accelerate") else "torchrun"
        rest = command[match.end() :]
        stop = _OPERATOR.search(rest)
        flags = _flags(rest[: stop.start()] if stop else rest)
        if processes_per_replica > 1:
            count = "--num_processes in total" if launcher == "accelerate launch" else "--nproc_per_node"
            problems.append(
                f"environment.replicas.processes_per_replica: {processes_per_replica} would start "
                f"{launcher} {processes_per_replica} times in each replica; {launcher} starts the "
                f"node's processes itself: leave processes_per_replica at 1 and give {launcher} {count}"
            )
        wired = _torchrun(nodes) if launcher == "torchrun" else _accelerate(nodes, flags, problems)
        fixed = TORCHRUN_RENDEZVOUS if launcher == "torchrun" else ACCELERATE_RENDEZVOUS
        for flag in fixed:
            if flag in flags:
                problems.append(
                    f"run.cmd: {launcher}'s --{flag} comes from each replica's wiring "
                    f"(Phalanx passes {_about(flag, wired)}); remove it from the command"
                )
        out.append(command[done : match.end()])
        out.append(" " + wired)
        done = match.end()
        inserted.append(f"{name} {wired}")
    if problems:
        raise SpecError(problems[0] if len(problems) == 1 else "; ".join(problems))
    out.append(command[done:])
    note = (
        "run.cmd starts a launcher: Phalanx gives it each replica's rendezvous ("
        + "; ".join(inserted)
        + "), one launcher per replica"
    )
    return Wiring("".join(out), note)


def _torchrun(nodes: int) -> str:
    return f"--nnodes={nodes} --node_rank={NODE} " + RENDEZVOUS.format(addr="master_addr", port="master_port")


def _accelerate(nodes: int, flags: dict[str, str | None], problems: list[str]) -> str:
    """accelerate's ``--num_processes`` counts every machine's processes: one per machine unless the
    command says how many (a multiple of the machines)."""
    given = flags.get("num_processes")
    total = nodes
    if given is not None:
        if not given.isdigit() or int(given) < nodes or int(given) % nodes:
            problems.append(
                f"run.cmd: accelerate launch --num_processes={given} must be a multiple of the "
                f"{nodes} replicas (it counts the processes of every machine)"
            )
        total = 0  # the command's own stays
    where = RENDEZVOUS.format(addr="main_process_ip", port="main_process_port")
    wired = f"--num_machines={nodes} --machine_rank={NODE} {where}"
    return wired + (f" --num_processes={total}" if total else "")


def _about(flag: str, wired: str) -> str:
    for word in wired.split():
        if word.startswith(f"--{flag}="):
            return word
    return "the rendezvous"


def _flags(text: str) -> dict[str, str | None]:
    """The launcher's own ``--flag[=value]`` words, up to the script (the first word ending in
    ``.py``, or after ``-m``/``--module`` and its module): what follows is the script's."""
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    flags: dict[str, str | None] = {}
    for i, word in enumerate(words):
        if word.endswith(".py") or (i > 0 and words[i - 1] in ("-m", "--module")):
            break
        if not word.startswith("-"):
            continue
        key, _, value = word.lstrip("-").partition("=")
        following = words[i + 1] if i + 1 < len(words) else None
        if not value and following is not None and not following.startswith("-"):
            value = following
        flags[key.replace("-", "_")] = value or None
    return flags
