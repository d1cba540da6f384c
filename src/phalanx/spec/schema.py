"""The version-1 experiment file: which keys exist, what each may hold, and the cross-checks.

``read_spec`` turns a position-carrying tree (``yamltree``) into an ExperimentSpec, recording every
problem in a Collector instead of stopping at the first, so the user fixes a file in one pass.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.domain import BackendKind, Framework
from phalanx.errors import UsageError
from phalanx.spec.errors import Collector, describe, did_you_mean, join
from phalanx.spec.inputs import INPUT_KEYS, dataset_ref_problem, parse_inputs
from phalanx.spec.model import Build, ExperimentSpec, ReplicaTemplate
from phalanx.spec.placeholders import check_overrides, check_placeholders, note_empty_params
from phalanx.spec.reserved import reserved_reason
from phalanx.spec.stall import read_stall
from phalanx.spec.topology import EnvironmentDraft, finish_topology, read_environment
from phalanx.spec.yamltree import Mark, YKey, YMap, YNode, YScalar, YSeq, is_null, plain
from phalanx.tracking.labels import MAX_TAG, label_problem

SUPPORTED_VERSION = 1
KINDS = ("experiment", "group", "job", "build", "notebook", "tensorboard", "pipeline")
# Polyaxon 0.x's services: started with their own commands, not run (phalanx.spec.service_files)
SERVICE_KINDS = {
    "notebook": "a notebook file is started with `phalanx notebook start -f FILE`, not run"
    " (docs/services.md)",
    "tensorboard": "a TensorBoard file is started with `phalanx tensorboard start -f FILE`, not run"
    " (docs/services.md)",
}
TOP_KEYS = (
    "version",
    "kind",
    "name",
    "project",
    "description",
    "framework",
    "backend",
    "tags",
    "params",
    "declarations",
    "environment",
    "build",
    "run",
    "env",
)
_LIB = (
    "a polyaxon-lib section (Polyaxon itself dropped it in 0.5), not supported:"
    " put the training code in a script and start it with run.cmd"
)
TOP_REFUSED = {
    "hptuning": "belongs to kind: group (hyperparameter search): write `kind: group` and run it with"
    " `phalanx group run -f FILE`, or remove it",
    "model": _LIB,
    "train": _LIB,
    "eval": _LIB,
    "inputs": "Polyaxon 0.6 `inputs` are not supported; give the values under params: instead",
    "outputs": "Polyaxon 0.6 `outputs` are not supported; remove it",
}
TOP_IGNORED = {
    "logging": "accepted for Polyaxon compatibility and ignored: Phalanx captures every replica's output"
}
BUILD_KEYS = ("image", "dockerfile", "build_steps", "pip_packages", "requirements", "env_vars")
BUILD_IGNORED = {
    name: "accepted for Polyaxon compatibility and ignored: Phalanx builds no images"
    for name in ("context", "ref", "nocache", "commit", "branch", "lang_env")
}
RUN_KEYS = ("cmd", "max_restarts", "max_run_seconds", "stall_notice", "hang_timeout", "checkpoints")

_CONTINUATION = re.compile(r"\\[ \t]*$")


def read_spec(
    c: Collector,
    root: YNode | None,
    overrides: Mapping[str, Any],
    group: GroupReading | None = None,
    extra_params: bool = False,
) -> ExperimentSpec | None:
    """The spec, or None when problems were found (they are in ``c``).

    ``group``: the file is a `kind: group` (read by ``spec.group``): its hptuning and inputs keys are
    accepted, and the matrix names count as known placeholders; the spec returned is the trials' base.
    An override that fills no placeholder and names no declared param is refused unless
    ``extra_params`` (then it is only recorded): a misspelt `--param lrr=0.1` used to be ignored.
    """
    if root is None:
        c.add(
            Mark(1, 1), "", "the file is empty; an experiment file needs at least version, kind and run.cmd"
        )
        return None
    if not isinstance(root, YMap):
        c.add(
            root, "", f"expected a mapping of keys (version, kind, run, ...) at the top, got {describe(root)}"
        )
        return None
    if _polyaxon_v1(c, root):
        return None  # one sentence says what the file is; its other keys would be seven more errors
    version = read_version(c, root)
    if not _read_kind(c, root, group is not None):
        return None  # a group or job file: the rest would only be noise
    data_inputs = group is None and data_inputs_section(root.get("inputs"))
    _check_top_keys(c, root, group is not None, data_inputs)

    def opt(name: str) -> YNode | None:
        node = root.get(name)
        return None if node is None or is_null(node) else node

    framework = c.choice(n, "framework", Framework, "framework") if (n := opt("framework")) else None
    backend = c.choice(n, "backend", BackendKind, "backend") if (n := opt("backend")) else None
    name, project, description, tags = read_labels(c, opt)
    params = _read_params(c, root)
    env = c.str_mapping(n, "env", env_names=True) if (n := opt("env")) else {}
    if (n := opt("env")) is not None:
        _refuse_reserved(c, n, "env")
    build = read_build(c, n) if (n := opt("build")) else Build()

    env_draft = read_environment(c, n) if (n := opt("environment")) else None
    framework = _section_framework(c, env_draft, framework, opt("framework"))
    invalid = framework is None and opt("framework") is not None
    topology = finish_topology(c, env_draft.topology if env_draft else None, framework, invalid)

    command, max_restarts, max_run_seconds = _read_run(c, root)
    checkpoints = _read_checkpoints(c, root)
    stall = read_stall(c, root)
    inputs = read_data_inputs(c, root) if data_inputs else ()
    known = {**(group.defaults if group else {}), **(params or {}), **overrides}
    if command is not None:
        names = {**known, **dict.fromkeys(group.sampled if group else ())}
        check_placeholders(c, root, command, names, {i.name for i in inputs} | _input_names(root))
        note_empty_params(c, command, known)
        if not extra_params and params is not None:
            check_overrides(c, command, _declared(params, group), overrides)

    if c.problems or version is None or command is None:
        return None
    return ExperimentSpec(
        version=version,
        kind="experiment",
        command=tuple(cmd for cmd, _ in command),
        framework=framework,
        backend=backend,
        name=name,
        project=project,
        description=description,
        tags=tags or (),
        params=known,
        master=env_draft.master if env_draft else ReplicaTemplate(),
        topology=topology,
        build=build,
        env=env or {},
        max_restarts=max_restarts,
        max_run_seconds=max_run_seconds,
        stall=stall,
        checkpoints=checkpoints,
        inputs=inputs,
    )


def _check_top_keys(c: Collector, root: YMap, in_group: bool, data_inputs: bool) -> None:
    """The top-level keys: a group file's hptuning keys, or `inputs:` as the data section, are known."""
    if data_inputs:  # `inputs:` naming datasets or datastores (phalanx.data)
        refused = {k: v for k, v in TOP_REFUSED.items() if k != "inputs"}
        c.mapping(root, "", (*TOP_KEYS, "inputs"), refused=refused, ignored=TOP_IGNORED)
    elif not in_group:
        c.mapping(root, "", TOP_KEYS, refused=TOP_REFUSED, ignored=TOP_IGNORED)
    else:
        refused = {k: v for k, v in TOP_REFUSED.items() if k not in GROUP_KEYS}
        c.mapping(root, "", (*TOP_KEYS, *GROUP_KEYS), refused=refused, ignored=TOP_IGNORED)


def read_labels(
    c: Collector, opt: Callable[[str], YNode | None]
) -> tuple[str | None, str | None, str | None, tuple[str, ...]]:
    """name, project, description and tags, each checked as a label where it is one."""
    name = _label(c, n, "name") if (n := opt("name")) else None
    project = _label(c, n, "project") if (n := opt("project")) else None
    description = c.text(n, "description") if (n := opt("description")) else None
    tags = c.texts(n, "tags") if (n := opt("tags")) else ()
    if tags and isinstance(n, YSeq):
        for i, item in enumerate(n.items):
            if isinstance(item, YScalar) and (problem := label_problem(str(tags[i]), "tag", MAX_TAG)):
                c.add(item, join("tags", i), problem)
    return name, project, description, tuple(tags or ())


def _section_framework(
    c: Collector, env_draft: EnvironmentDraft | None, framework: Framework | None, top: YNode | None
) -> Framework | None:
    """The framework named by an environment section (``environment.pytorch: ...``), when the top
    `framework:` does not name one; a conflict between the two is an error at the section."""
    if env_draft is None or env_draft.section_framework is None:
        return framework
    section, key = env_draft.section_framework
    if framework is not None and framework is not section and top is not None:
        c.add(
            key,
            f"environment.{key.name}",
            f"conflicts with `framework: {framework.value}` (line {top.mark.line});"
            " keep one, e.g. `framework:` with environment.replicas",
        )
    elif framework is None and top is None:
        return section
    return framework


def _declared(params: Mapping[str, Any], group: GroupReading | None) -> dict[str, Any]:
    """The names an override may set: a group's inputs and searched names count as declared (a
    searched one has its own error)."""
    if group is None:
        return dict(params)
    return {**params, **group.defaults, **dict.fromkeys(group.sampled)}


def data_inputs_section(node: YNode | None) -> bool:
    """Whether ``inputs:`` is the data section (items naming a dataset or datastore), not Polyaxon
    0.6's typed params (refused with their own message)."""
    return isinstance(node, YSeq) and any(
        isinstance(item, YMap) and any(_names_data(k.name) for k, _ in item.items) for item in node.items
    )


def _input_names(root: YMap) -> set[str]:
    """The names ``inputs:`` gives, valid or not (an input refused for its own mistake is not also
    a placeholder naming no input)."""
    node = root.get("inputs")
    items = node.items if data_inputs_section(node) and isinstance(node, YSeq) else []
    named = (item.get("name") for item in items if isinstance(item, YMap))
    return {str(n.value) for n in named if isinstance(n, YScalar)}


def _names_data(key: str) -> bool:
    """A data input's key, or a near miss of one (`datset:` is a typo to point at, not Polyaxon)."""
    return key in ("dataset", "datastore") or bool(
        difflib.get_close_matches(key, ("dataset", "datastore"), n=1, cutoff=0.75)
    )


def read_data_inputs(c: Collector, root: YMap) -> tuple[Any, ...]:
    """inputs: [{name, dataset | datastore, path, mode}]: the data every replica gets (phalanx.data)."""
    node = root.get("inputs")
    assert isinstance(node, YSeq)
    items = []
    maps: list[YMap] = []
    for i, item in enumerate(node.items):
        m = c.mapping(item, join("inputs", i), INPUT_KEYS)
        if m is None:
            return ()
        maps.append(m)
        items.append({k: v for k, v in plain(m).items() if k in INPUT_KEYS})
    # each input on its own, so that every one's mistake is said at that input's line
    wrong = False
    for i, (m, given) in enumerate(zip(maps, items, strict=True)):
        ref = m.get("dataset")  # a malformed reference is said at its own line (`phalanx run` refuses it)
        ref_problem = None if given.get("dataset") is None else dataset_ref_problem(str(given["dataset"]))
        if ref is not None and ref_problem:
            c.add(ref, join(join("inputs", i), "dataset"), ref_problem)
            wrong = True
            continue
        try:
            parse_inputs([given])
        except UsageError as exc:
            c.add(m, join("inputs", i), exc.message.removeprefix("inputs[0]: "))
            wrong = True
    if wrong:
        return ()
    try:
        return parse_inputs(items)
    except UsageError as exc:
        c.add(node, "inputs", exc.message.removeprefix("inputs: "))
        return ()


def _read_checkpoints(c: Collector, root: YMap) -> dict[str, Any] | None:
    """run.checkpoints: the retention policy of the experiment's checkpoints (phalanx.checkpoints)."""
    run = root.get("run")
    if not isinstance(run, YMap):
        return None
    node = run.get("checkpoints")
    if node is None or is_null(node):
        return None
    from phalanx.checkpoints import POLICY_KEYS, Policy, PolicyError  # why: only a file that has one

    m = c.mapping(node, "run.checkpoints", POLICY_KEYS)
    if m is None:
        return None
    # an unknown key was reported by c.mapping (with a did-you-mean): parse only the known ones,
    # so the same typo is not a second problem
    known = {k: v for k, v in plain(m).items() if k in POLICY_KEYS}
    try:
        return Policy.parse(known, "run.checkpoints").to_json()
    except PolicyError as exc:
        for path, message in exc.problems:
            key = path.rsplit(".", 1)[-1]
            c.add(m.get(key) or m.key(key) or m if key in POLICY_KEYS else m, path, message)
        return None


def _label(c: Collector, node: YNode, path: str) -> str | None:
    """A name or project: text on one line, not too long (phalanx.tracking.labels), else a problem
    at its position."""
    value = c.text(node, path)
    if value is not None and (problem := label_problem(value, path)):
        c.add(node, path, problem)
        return None
    return value


# Polyaxon v1.x's kinds: a file with one of them is of the newer format, not a broken 0.x file
POLYAXON_V1_KINDS = ("component", "operation")


def _polyaxon_v1(c: Collector, root: YMap) -> bool:
    """True (and one problem) for a Polyaxon v1.x file (`kind: component` or `operation`, usually
    `version: 1.1`): Phalanx reads the 0.x format, and every other key would only be noise."""
    node = root.get("kind")
    kind = node.value if isinstance(node, YScalar) else None
    if node is None or kind not in POLYAXON_V1_KINDS:
        return False
    c.add(
        node,
        "kind",
        f"'{kind}' is a Polyaxon v1.x file; Phalanx reads the Polyaxon 0.x format (`version: 1` with"
        " `kind: experiment`, or `kind: group` for a search, and the command in `run.cmd`). Rewrite it"
        " in that format: docs/experiment-file.md, 'From a Polyaxon v1.x file', maps each v1.x key",
    )
    return True


def read_version(c: Collector, root: YMap) -> int | None:
    node = root.get("version")
    if node is None:
        c.add(root, "version", f"missing; add `version: {SUPPORTED_VERSION}` at the top")
        return None
    v = node.value if isinstance(node, YScalar) else None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != SUPPORTED_VERSION:
        c.add(
            node,
            "version",
            f"unsupported version {_shown(node)}; Phalanx reads `version: {SUPPORTED_VERSION}`",
        )
        return None
    return SUPPORTED_VERSION


def _shown(node: YNode) -> str:
    if isinstance(node, YScalar) and node.value is not None and node.raw.strip():
        return node.raw.strip()
    return describe(node)


def _read_kind(c: Collector, root: YMap, group: bool = False) -> bool:
    """False when the file is of a kind we must not read further."""
    node = root.get("kind")
    if node is None:
        c.add(root, "kind", "missing; add `kind: group`" if group else "missing; add `kind: experiment`")
        return True
    v = node.value if isinstance(node, YScalar) else None
    if v == ("group" if group else "experiment"):
        return True
    if v == "group":
        c.add(
            node,
            "kind",
            "a group is a hyperparameter search: run it with `phalanx group run -f FILE`"
            " (`phalanx check -f FILE` shows its search space)",
        )
        return False
    if group and v == "experiment":
        c.add(node, "kind", "an experiment file: run it with `phalanx run -f FILE`")
        return False
    if isinstance(v, str) and v in SERVICE_KINDS:
        c.add(node, "kind", SERVICE_KINDS[v])
        return False
    if isinstance(v, str) and v in KINDS:
        c.add(node, "kind", f"'{v}' is not supported yet; Phalanx runs kind: experiment files")
        return False
    if not isinstance(v, str):
        c.add(node, "kind", f"expected a kind name, got {describe(node)}")
    else:
        c.add(node, "kind", f"unknown kind '{v}'{did_you_mean(v, KINDS)} (Phalanx runs kind: experiment)")
    return True


@dataclass(frozen=True)
class GroupReading:
    """What a group file adds to the experiment keys: ``defaults`` (from Polyaxon `inputs`) fill
    placeholders below params; ``sampled`` names (the matrix, hyperband's resource) are filled per trial."""

    defaults: Mapping[str, Any] = field(default_factory=dict)
    sampled: tuple[str, ...] = ()


GROUP_KEYS = ("hptuning", "inputs")


def _read_params(c: Collector, root: YMap) -> dict[str, Any] | None:
    found = [(k, v) for k, v in root.items if k.name in ("params", "declarations") and not is_null(v)]
    if len(found) > 1:
        second = found[1][0]
        c.add(
            second,
            second.name,
            f"give params or declarations, not both ({found[0][0].name} is at line {found[0][0].mark.line})",
        )
    if not found:
        return {}
    key, node = found[0]
    m = c.mapping(node, key.name)
    return {k.name: plain(v) for k, v in m.items} if m is not None else None


def read_build(c: Collector, node: YNode) -> Build:
    m = c.mapping(node, "build", BUILD_KEYS, ignored=BUILD_IGNORED)
    if m is None:
        return Build()
    values: dict[str, Any] = {}
    for key, value in m.items:
        path = join("build", key.name)
        if is_null(value) or key.name not in BUILD_KEYS:
            continue
        if key.name in ("image", "dockerfile", "requirements"):
            values[key.name] = c.text(value, path)
        elif key.name in ("build_steps", "pip_packages"):
            if isinstance(value, YScalar) and isinstance(value.value, str):
                values[key.name] = (value.value,)  # one step written as text
            else:
                values[key.name] = c.texts(value, path) or ()
        else:
            values["env_vars"] = read_env_vars(c, value, path) or {}
    return Build(**{k: v for k, v in values.items() if v is not None})


def _refuse_reserved(c: Collector, node: YNode, path: str) -> None:
    """Variables the launcher sets itself (RANK, TF_CONFIG, PHALANX_*...): see spec.reserved."""
    named: list[tuple[YNode | YKey, Any]]
    if isinstance(node, YMap):
        named = [(key, key.name) for key, _ in node.items]
    elif isinstance(node, YSeq):  # env_vars as [NAME, value] pairs
        named = [
            (item.items[0], item.items[0].value)
            for item in node.items
            if isinstance(item, YSeq) and item.items and isinstance(item.items[0], YScalar)
        ]
    else:
        return
    for where, name in named:
        why = reserved_reason(name) if isinstance(name, str) else None
        if why is not None:
            c.add(where, join(path, name), why)


def read_env_vars(c: Collector, node: YNode, path: str) -> dict[str, str] | None:
    """`env_vars` as Polyaxon wrote it (a list of [name, value] pairs) or as a mapping."""
    _refuse_reserved(c, node, path)
    if not isinstance(node, YSeq):
        return c.str_mapping(node, path, env_names=True)
    out: dict[str, str] = {}
    for i, item in enumerate(node.items):
        sub = join(path, i)
        if not isinstance(item, YSeq) or len(item.items) != 2:
            c.add(item, sub, f"expected a [NAME, value] pair, got {describe(item)}")
            continue
        name = c.text(item.items[0], join(sub, 0))
        value = c.scalar_text(item.items[1], join(sub, 1))
        if name is not None and value is not None:
            out[name] = value
    return out


def _read_run(c: Collector, root: YMap) -> tuple[list[tuple[str, YScalar]] | None, int, float | None]:
    run = root.get("run")
    if run is None or is_null(run):
        c.add(
            root.key("run") or root,
            "run.cmd",
            "missing; every experiment needs a command, e.g. `run: {cmd: python train.py}`",
        )
        return None, 0, None
    m = c.mapping(run, "run", RUN_KEYS)
    if m is None:
        return None, 0, None
    max_restarts = 0
    if (n := m.get("max_restarts")) is not None and not is_null(n):
        max_restarts = c.integer(n, "run.max_restarts", what="a whole number of restarts") or 0
    max_run_seconds = None
    if (n := m.get("max_run_seconds")) is not None and not is_null(n):
        max_run_seconds = c.number(n, "run.max_run_seconds")
    cmd = m.get("cmd")
    if cmd is None or is_null(cmd):
        c.add(
            m.key("cmd") or root.key("run") or m,
            "run.cmd",
            "missing; give the shell command to run, e.g. `cmd: python train.py`",
        )
        return None, max_restarts, max_run_seconds
    items = cmd.items if isinstance(cmd, YSeq) else [cmd]
    commands: list[tuple[str, YScalar]] = []
    for i, item in enumerate(items):
        path = join("run.cmd", i) if isinstance(cmd, YSeq) else "run.cmd"
        text = c.text(item, path)
        if text is None:
            continue
        if not text.strip():
            c.add(item, path, "is empty; give the shell command to run")
            continue
        assert isinstance(item, YScalar)
        commands.append((_join_continuations(item), item))
    if isinstance(cmd, YSeq) and not cmd.items:
        c.add(cmd, "run.cmd", "is an empty list; give at least one command")
    return (commands if commands else None), max_restarts, max_run_seconds


def _join_continuations(node: YScalar) -> str:
    """Undo YAML's folding of shell line continuations in plain scalars.

    `cmd: python x.py \\` + newline + `--lr=1` folds to "python x.py \\ --lr=1", which the shell
    would read as an argument " --lr=1". Polyaxon's examples are written this way; we rebuild the
    line from the source, dropping the trailing backslashes.
    """
    if node.style is not None or "\n" not in node.raw:
        return str(node.value)
    lines = [line.strip() for line in node.raw.split("\n")]
    if not any(_CONTINUATION.search(line) for line in lines):
        return str(node.value)
    parts = [_CONTINUATION.sub("", line).rstrip() for line in lines]
    return " ".join(p for p in parts if p)
