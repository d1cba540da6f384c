"""`kind: notebook` and `kind: tensorboard` files: Polyaxon 0.x's services, started with
`phalanx notebook start -f FILE` and `phalanx tensorboard start -f FILE` (docs/services.md).

A notebook file says what a project's notebook server runs on: its Python environment (``build:``,
the same rules as an experiment's), its data (``inputs:``) and its size (``environment:
resources:``). A TensorBoard file names a project; its ``build:`` means nothing here (Phalanx's own
TensorBoard renders what the experiments recorded) and is accepted with a note. Problems are
collected and raised together, located, as for an experiment file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from phalanx.domain import Resources
from phalanx.spec.errors import Collector, describe, sorted_problems
from phalanx.spec.inputs import InputSpec
from phalanx.spec.loader import read_file_text
from phalanx.spec.model import Build
from phalanx.spec.schema import read_build, read_data_inputs, read_labels, read_version
from phalanx.spec.topology import read_resources
from phalanx.spec.yamltree import Mark, YMap, YNode, YScalar, YSeq, is_null

NOTEBOOK_KEYS = (
    "version",
    "kind",
    "name",
    "project",
    "description",
    "tags",
    "build",
    "environment",
    "inputs",
)
BOARD_KEYS = ("version", "kind", "name", "project", "description", "tags", "build")
_RUNS = "runs JupyterLab: a notebook file has no run section; remove it"
NOTEBOOK_REFUSED = {
    "run": f"a notebook {_RUNS}",
    "framework": "a notebook runs once, on this machine or the server: remove framework",
    "backend": "a notebook runs where its server runs: remove backend",
    "params": "a notebook takes no params; remove them",
    "declarations": "a notebook takes no declarations; remove them",
}
BOARD_IGNORED = {
    "build": "accepted for Polyaxon compatibility and ignored: Phalanx's own TensorBoard renders what the"
    " experiments recorded",
}
BOARD_REFUSED = {
    "run": "a TensorBoard file has no run section: the board runs TensorBoard; remove it",
    "environment": "a board needs no resources of its own; remove environment",
    "inputs": "a board reads what its experiments recorded: inputs are a notebook's; remove them",
}


@dataclass(frozen=True)
class NotebookFile:
    """A `kind: notebook` file: ``folder`` is its own (a requirements file is read from there)."""

    folder: Path
    project: str | None = None
    build: Build = field(default_factory=Build)
    inputs: tuple[InputSpec, ...] = ()
    resources: Resources | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class BoardFile:
    """A `kind: tensorboard` file: the project whose board it asks for."""

    project: str | None = None
    notes: tuple[str, ...] = ()


def load_notebook_file(path: str | Path) -> NotebookFile:
    """A `kind: notebook` file read and checked; SpecError listing every problem, located."""
    c = Collector(str(path))
    root = _root(c, read_file_text(path), "notebook")
    project = read_labels(c, lambda name: _given(root, name))[1]
    build = read_build(c, n) if (n := _given(root, "build")) else Build()
    resources = _resources(c, n) if (n := _given(root, "environment")) else None
    inputs: tuple[InputSpec, ...] = ()
    if isinstance(n := _given(root, "inputs"), YSeq):
        inputs = read_data_inputs(c, root)
    elif n is not None:
        c.add(n, "inputs", "expected a list like [{name: digits, dataset: digits@latest}]")
    c.raise_if_any()
    return NotebookFile(
        folder=Path(path).resolve().parent,
        project=project,
        build=build,
        inputs=inputs,
        resources=resources,
        notes=_notes(c),
    )


def load_board_file(path: str | Path) -> BoardFile:
    """A `kind: tensorboard` file read and checked; SpecError listing every problem, located."""
    c = Collector(str(path))
    root = _root(c, read_file_text(path), "tensorboard")
    project = read_labels(c, lambda name: _given(root, name))[1]
    c.raise_if_any()
    return BoardFile(project=project, notes=_notes(c))


def _root(c: Collector, text: str, kind: str) -> YMap:
    """The file's top mapping, its version, kind and keys checked (SpecError at once when it is not
    a file of ``kind`` at all: its other keys would only be noise)."""
    root = c.compose(text)
    if not isinstance(root, YMap):
        shown = describe(root) if root is not None else "an empty file"
        c.add(root or Mark(1, 1), "", f"expected a mapping of keys (version, kind, ...), got {shown}")
        c.raise_if_any()
    assert isinstance(root, YMap)
    read_version(c, root)
    node = root.get("kind")
    value = node.value if isinstance(node, YScalar) else None
    if node is None:
        c.add(root, "kind", f"missing; add `kind: {kind}`")
    elif value != kind:
        other = f"`phalanx {value} start -f FILE`" if value in ("notebook", "tensorboard") else None
        started = f"; start it with {other}" if other else ""
        c.add(node, "kind", f"this command starts a `kind: {kind}` file, not {_shape(node)}{started}")
        c.raise_if_any()
    if kind == "notebook":
        c.mapping(root, "", NOTEBOOK_KEYS, refused=NOTEBOOK_REFUSED)
    else:
        c.mapping(root, "", BOARD_KEYS, refused=BOARD_REFUSED, ignored=BOARD_IGNORED)
    return root


def _resources(c: Collector, node: YNode) -> Resources | None:
    """environment: resources only (a notebook server is one process tree, on one machine)."""
    m = c.mapping(
        node,
        "environment",
        ("resources",),
        refused={
            key: "a notebook runs once: its environment takes resources only"
            for key in ("replicas", "n_workers", "n_ps", "topology", "default_worker", "default_ps")
        },
    )
    found = m.get("resources") if m is not None else None
    if found is None or is_null(found):
        return None
    return read_resources(c, found, "environment.resources")


def _given(root: YMap, name: str) -> YNode | None:
    node = root.get(name)
    return None if node is None or is_null(node) else node


def _shape(node: YNode | None) -> str:
    if isinstance(node, YScalar) and isinstance(node.value, str):
        return f"kind: {node.value}"
    return describe(node) if node is not None else "an empty file"


def _notes(c: Collector) -> tuple[str, ...]:
    return tuple(str(n) for n in sorted_problems(c.notes))
