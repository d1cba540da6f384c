"""`kind: group` files: an experiment plus `hptuning` (Polyaxon's hyperparameter search).

A group is read exactly like an experiment (same keys, same located problems) with the matrix names
counted as placeholders; what it adds is a GroupSpec: the trials' base ExperimentSpec and the search
(matrix of distributions, one search algorithm, early stopping, per-trial pruning). Nothing here
imports Optuna: the search space is plain data, turned into Optuna calls by ``phalanx.groups.search``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from phalanx.domain import Group, plural
from phalanx.errors import Problem, SpecError
from phalanx.spec.errors import Collector, did_you_mean, join, sorted_problems
from phalanx.spec.group_hptuning import _read_hptuning, hyperband_trials
from phalanx.spec.group_matrix import _budget_mark, _matrix_mark
from phalanx.spec.group_model import (
    DISTRIBUTIONS,
    Distribution,
    EarlyStop,
    GroupSpec,
    HPTuning,
    Metric,
    Pruning,
    Search,
    grid_size,
)
from phalanx.spec.loader import MAX_FILE_BYTES
from phalanx.spec.placeholders import PLACEHOLDER
from phalanx.spec.schema import GroupReading, data_inputs_section, read_spec
from phalanx.spec.yamltree import Mark, TreeError, YMap, YNode, YScalar, compose, is_null, plain

# the public names: the reading lives in group_model (data), group_matrix (`matrix`),
# group_hptuning (the rest of `hptuning`) and here (the file, its checks, its rendering)
__all__ = [
    "DISTRIBUTIONS",
    "Distribution",
    "EarlyStop",
    "GroupSpec",
    "HPTuning",
    "Metric",
    "Pruning",
    "Search",
    "example_values",
    "grid_size",
    "hyperband_trials",
    "is_group_file",
    "load_group",
    "load_group_text",
    "search_space_text",
]


# ---- loading ----------------------------------------------------------------------------------


def load_group(
    path: str | Path,
    params: Mapping[str, Any] | None = None,
    allow_unused: bool = False,
    extra_params: bool = False,
) -> GroupSpec:
    """Read and validate a group file; SpecError (exit 2) lists every problem with its place."""
    p = Path(path)
    name = str(path)
    try:
        data = p.read_bytes()[: MAX_FILE_BYTES + 1]
    except FileNotFoundError:
        raise SpecError(Problem(f"{name}: no such file")) from None
    except IsADirectoryError:
        raise SpecError(Problem(f"{name} is a directory; give the group file inside it")) from None
    except OSError as exc:
        raise SpecError(Problem(f"{name}: cannot read it ({exc.strerror or exc})")) from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(Problem(f"{name}: the file is larger than 1 MiB, refused"))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecError(Problem(f"{name}: the file is not UTF-8 text")) from None
    group = load_group_text(text, name, params=params, allow_unused=allow_unused, extra_params=extra_params)

    return replace(group, base=replace(group.base, source_file=str(p.resolve())))


def load_group_text(
    text: str,
    filename: str = "<text>",
    params: Mapping[str, Any] | None = None,
    allow_unused: bool = False,
    extra_params: bool = False,
) -> GroupSpec:
    """``extra_params``: a ``--param`` that the file neither declares nor uses is recorded instead of
    refused (as ``phalanx run --extra-params``): a misspelt one would otherwise run the whole search
    with the file's value."""

    c = Collector(filename)
    root = c.compose(text)
    if not isinstance(root, YMap):
        c.add(
            root if root is not None else Mark(1, 1),
            "",
            "expected a mapping with version, kind, hptuning, run",
        )
        c.raise_if_any()
    assert isinstance(root, YMap)
    defaults = _read_inputs(c, root.get("inputs"))
    _single_process_framework(c, root)
    hp_node = root.get("hptuning")
    hptuning = None
    if hp_node is None or is_null(hp_node):
        c.add(
            root.key("hptuning") or root,
            "hptuning",
            "missing; a group needs hptuning: {matrix: ..., random_search: ...}",
        )
    else:
        hptuning = _read_hptuning(c, hp_node)
    # the matrix names as written, even when a distribution is wrong: no second error for {{ lr }}
    names = _matrix_names(hp_node)
    # hyperband's budget name as written too: a wrong distribution must not make {{ epochs }} unknown
    resource = hptuning.search.resource if hptuning else _resource_name(hp_node)
    sampled = names + ((resource,) if resource else ())
    spec = read_spec(
        c,
        root,
        dict(params or {}),
        group=GroupReading(defaults=defaults, sampled=sampled),
        extra_params=extra_params,
    )
    _check_used(c, root, names, resource, allow_unused)
    _check_overrides(c, hp_node, dict(params or {}), resource)
    c.raise_if_any()
    assert spec is not None and hptuning is not None
    spec = replace(spec, source_text=text)
    return GroupSpec(base=spec, hptuning=hptuning, notes=tuple(str(n) for n in sorted_problems(c.notes)))


SINGLE_PROCESS_FRAMEWORKS = ("keras", "scikit-learn", "sklearn", "xgboost", "lightgbm")


def _single_process_framework(c: Collector, root: YMap) -> None:
    """`framework: keras` (Polyaxon's examples): a one-process trial; there is nothing to wire, so the
    key is dropped with a note rather than refused."""
    node = root.get("framework")
    if isinstance(node, YScalar) and node.value in SINGLE_PROCESS_FRAMEWORKS:
        c.note(node, "framework", f"{node.value}: each trial runs as one process (nothing to wire); ignored")
        root.items = [(k, v) for k, v in root.items if k.name != "framework"]
        root.index.pop("framework", None)


def _read_inputs(c: Collector, node: YNode | None) -> dict[str, Any]:
    """Polyaxon 0.6 `inputs: [{name, type, default, is_optional}]`: their defaults become params."""
    if node is None or is_null(node):
        return {}
    if data_inputs_section(node):
        # read as Polyaxon's typed inputs, each dataset: was "unknown key" and each input "has no
        # default; pass --param", which sent the user after the wrong fix
        c.add(
            node,
            "inputs",
            "a group's trials do not read data inputs (dataset: or datastore:, an experiment file's"
            " inputs); give the data's folder as a param instead (params: {data: /path/to/data})",
        )
        return {}
    seq = c.sequence(node, "inputs")
    out: dict[str, Any] = {}
    for i, item in enumerate(seq.items if seq else []):
        path = join("inputs", i)
        m = c.mapping(item, path, ("name", "type", "default", "is_optional", "description", "value"))
        if m is None:
            continue
        name_node = m.get("name")
        if name_node is None:
            c.add(m, join(path, "name"), "missing; every input needs a name")
            continue
        name = c.text(name_node, join(path, "name"))
        value_node = m.get("value") or m.get("default")
        if name is None:
            continue
        if value_node is None or is_null(value_node):
            c.add(m, path, f"input {name!r} has no default; give one, or pass --param {name}=VALUE")
            continue
        out[name] = plain(value_node)
    return out


def _check_overrides(
    c: Collector, hp_node: YNode | None, params: dict[str, Any], resource: str | None
) -> None:
    """`--param lr=0.01` for a name the search samples (or hyperband's budget) would be replaced in
    every trial by the sampled value: the user's value silently lost. Said where the name is searched."""
    if not params or not isinstance(hp_node, YMap):
        return
    matrix = hp_node.get("matrix")
    for name, value in params.items():
        shown = f"--param {name}={value}"
        if isinstance(matrix, YMap) and matrix.get(name) is not None:
            c.add(
                matrix.key(name) or matrix,
                join("hptuning.matrix", name),
                f"{shown} sets a name the search samples, so every trial would use the sampled value;"
                f" drop {shown}, or remove {name} from the matrix to fix it for every trial",
            )
        elif name == resource:
            c.add(
                hp_node.key("hyperband") or hp_node,
                "hptuning.hyperband.resource",
                f"{shown} sets hyperband's budget param, which every trial gets as max_iter;"
                " drop it, or change hptuning.hyperband.max_iter",
            )


def _resource_name(hp_node: YNode | None) -> str | None:
    """`hptuning.hyperband.resource.name` as written, when the hptuning as a whole is invalid."""
    band = hp_node.get("hyperband") if isinstance(hp_node, YMap) else None
    resource = band.get("resource") if isinstance(band, YMap) else None
    name = resource.get("name") if isinstance(resource, YMap) else None
    if isinstance(name, YScalar) and isinstance(plain(name), str):
        return str(plain(name))
    return None


def _matrix_names(hp_node: YNode | None) -> tuple[str, ...]:
    matrix = hp_node.get("matrix") if isinstance(hp_node, YMap) else None
    return tuple(k.name for k, _ in matrix.items) if isinstance(matrix, YMap) else ()


def _command_text(root: YMap) -> str | None:
    run = root.get("run")
    cmd = run.get("cmd") if isinstance(run, YMap) else None
    if cmd is None:
        return None
    value = plain(cmd)
    return " ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _check_used(
    c: Collector, root: YMap, names: tuple[str, ...], resource: str | None, allow_unused: bool
) -> None:
    """A matrix name run.cmd never uses still reaches the script (PHALANX_PARAMS, read by
    ``task.connect()`` / ``task.get_parameters()``, as Polyaxon's corpus files rely on), so it is a
    note. Only a near miss of a placeholder the command does use (`lerning_rate` beside
    ``{{ learning_rate }}``) is an error, unless --allow-unused: that typo would waste the search."""
    text = _command_text(root)
    if text is None:
        return  # no command: read_spec says so
    used = {m.group(1).strip() for m in PLACEHOLDER.finditer(text)}
    hpn = root.get("hptuning")
    wanted = [(n, "hptuning.matrix", "is searched") for n in names]
    if resource:
        wanted.append((resource, "hptuning.hyperband.resource.name", "is hyperband's budget"))
    for name, where, what in wanted:
        if name in used:
            continue
        at = (
            (_matrix_mark(hpn, name) if where == "hptuning.matrix" else _budget_mark(hpn))
            if isinstance(hpn, YMap)
            else root.mark
        )
        path = join(where, name) if where == "hptuning.matrix" else where
        hint = did_you_mean(name, used)
        if hint and not allow_unused:
            c.add(
                at,
                path,
                f"{name!r} {what} but run.cmd never uses {{{{ {name} }}}}{hint} Fix the name, or pass "
                "--allow-unused if the script reads it through task.connect() / PHALANX_PARAMS",
            )
        else:
            c.note(
                at,
                path,
                f"{name!r} {what} but run.cmd never uses {{{{ {name} }}}}{hint}: the script gets it only "
                "through task.connect() / task.get_parameters() (PHALANX_PARAMS)",
            )


def search_space_text(group: GroupSpec) -> str:
    """What `phalanx check` prints for a group: the search and each param's distribution."""
    hp = group.hptuning
    s = hp.search
    lines = [
        f"search: {s.kind}"
        + (
            f" ({plural(s.n_trials, 'trial')})"
            if s.n_trials and s.n_trials == hp.planned_trials()
            else f" ({plural(hp.planned_trials(), 'trial')}: the whole grid)"
        )
        + f", concurrency {hp.concurrency}"
        + (f", seed {s.seed}" if s.seed is not None else "")
    ]
    if s.metric:
        lines.append(f"metric: {s.metric.name} ({s.metric.optimization})")
    if s.kind == "hyperband":
        lines.append(f"hyperband: max_iter {s.max_iter}, eta {s.eta}, budget param {{{{ {s.resource} }}}}")
    if hp.pruning and hp.pruning.kind != "hyperband":
        lines.append(
            f"pruning: {hp.pruning.kind} on {hp.pruning.metric.name} ({hp.pruning.metric.optimization})"
        )
    for e in hp.early_stopping:
        lines.append(
            f"early stopping: the group stops when {e.metric}"
            f" {'>=' if e.optimization == 'maximize' else '<='} {e.value:g}"
        )
    lines.append("matrix:")
    width = max(len(d.name) for d in hp.matrix)
    for d in hp.matrix:
        lines.append(f"  {d.name.ljust(width)}  {d.describe()}")
    return "\n".join(lines)


def example_values(group: GroupSpec) -> dict[str, Any]:
    """One trial's values without sampling (the first choice, the low bound, the mean): what
    `phalanx check` shows a trial's topology with."""
    out: dict[str, Any] = {}
    for d in group.hptuning.matrix:
        if d.choices:
            out[d.name] = d.choices[0]
        elif "low" in d.args:
            low = d.args["low"]
            out[d.name] = math.exp(low) if d.kind.endswith("loguniform") else low
        else:
            loc = d.args["loc"]
            out[d.name] = math.exp(loc) if d.kind.endswith("lognormal") else loc
    s = group.hptuning.search
    if s.resource and s.max_iter:
        out[s.resource] = s.max_iter if s.resource_type == "int" else float(s.max_iter)
    return out


def is_group_file(path: str | Path) -> bool:
    """Whether the file says `kind: group` (a cheap look before choosing the reader)."""
    try:
        text = Path(path).read_bytes()[:MAX_FILE_BYTES].decode("utf-8-sig", errors="replace")
    except OSError:
        return False
    return is_group_text(text, str(path))


def is_group_text(text: str, filename: str = "<text>") -> bool:
    """Whether the text says `kind: group` (the server's look at a submitted file)."""
    try:
        root, _ = compose(text[:MAX_FILE_BYTES], filename)
    except (TreeError, Exception):
        return False
    node = root.get("kind") if isinstance(root, YMap) else None
    return isinstance(node, YScalar) and node.value == "group"


def recorded_group_spec(group: Group) -> GroupSpec:
    """The GroupSpec of a recorded group, from the text stored with it (the file may have changed)."""
    spec = load_group_text(
        group.spec_text,
        group.source_file or "group.yml",
        params=dict(group.options.get("params") or {}),
        allow_unused=bool(group.options.get("allow_unused")),
        extra_params=bool(group.options.get("extra_params")),
    )
    return replace(spec, base=replace(spec.base, source_file=group.source_file))
