"""No import circle between Phalanx's rooms, lazy imports included (issue 23: "no import circle").

grimp (import-linter's graph) reads every import statement, those inside functions too, so an import
written lazily to dodge a circle at run time is still an arrow here. Two checks, both static (no
process, no import of the package's modules):

* between rooms (``phalanx.X``: a sub-package or a top-level module, and the package root itself):
  no circle at all, imports for type annotations included;
* between modules: no circle of imports that run (at module level or inside functions), beyond
  any named in ``KNOWN_MODULE_CIRCLES`` with why it stays (none now); one that disappears must
  leave the list too, so the list never lies.

A failure names the arrows of each circle, each with one import statement that makes it
(``importer -> imported (importer line N: the statement)``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

import pytest

grimp = pytest.importorskip("grimp")

# Module circles inside one room that remain, each with the reason it is left (none now; an entry
# whose circle is gone must leave, the test says so). Between modules, an import made only for
# type annotations (under ``if TYPE_CHECKING:``, never executed) is no arrow: a helper split out
# of a class annotates ``self: Supervisor`` without importing the class at run time.
KNOWN_MODULE_CIRCLES: dict[frozenset[str], str] = {}


@cache
def _graph(type_checking: bool = True) -> Any:
    return grimp.build_graph("phalanx", cache_dir=None, exclude_type_checking_imports=not type_checking)


def room(module: str) -> str:
    """``phalanx.store.sql.models`` -> ``phalanx.store``; the package root is a room of its own."""
    return ".".join(module.split(".")[:2])


def circles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def cycle_through(part: list[str], edges: Mapping[str, Iterable[str]]) -> list[str]:
    """One closed path inside ``part`` starting at its first node (a breadth-first way back)."""
    members = set(part)
    start = part[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(edges.get(node, ())):
                if nxt not in members:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return [start]


def _why(importer_room: str, imported_room: str) -> str:
    """One import statement that makes the arrow ``importer_room -> imported_room``."""
    graph = _graph()
    for importer in sorted(m for m in graph.modules if room(m) == importer_room):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if room(imported) == imported_room:
                return _statement(importer, imported)
    return "?"


def _statement(importer: str, imported: str) -> str:
    return f"{importer} -> {imported} ({_line(importer, imported)})"


def _line(importer: str, imported: str) -> str:
    details = _graph().get_import_details(importer=importer, imported=imported)
    return f"line {details[0]['line_number']}: {details[0]['line_contents']}" if details else "?"


def describe(path: list[str], statement: Any) -> str:
    return "\n".join(f"  {a} -> {b}: {statement(a, b)}" for a, b in itertools.pairwise(path))


def room_edges() -> dict[str, set[str]]:
    graph = _graph()
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        mine = edges.setdefault(room(module), set())
        mine.update(
            room(i) for i in graph.find_modules_directly_imported_by(module) if room(i) != room(module)
        )
    return edges


def module_edges() -> dict[str, set[str]]:
    graph = _graph(type_checking=False)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def test_no_import_circle_between_rooms() -> None:
    edges = room_edges()
    found = circles(edges)
    report = [
        f"circle between {', '.join(part)}:\n{describe(cycle_through(part, edges), _why)}" for part in found
    ]
    assert not found, "import circles between Phalanx's rooms (lazy imports count):\n" + "\n".join(report)


def test_no_new_import_circle_between_modules() -> None:
    edges = module_edges()
    found = {frozenset(part): part for part in circles(edges)}
    new = [part for key, part in found.items() if key not in KNOWN_MODULE_CIRCLES]
    report = [
        f"circle between {', '.join(part)}:\n{describe(cycle_through(part, edges), _line)}" for part in new
    ]
    assert not new, "new import circles between modules (lazy imports count):\n" + "\n".join(report)
    gone = [sorted(key) for key in KNOWN_MODULE_CIRCLES if key not in found]
    assert not gone, f"these circles are gone: remove them from KNOWN_MODULE_CIRCLES: {gone}"


def test_a_circle_is_found_and_named_by_its_arrows() -> None:
    """The finder itself: a three-room circle beside a one-way arrow."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert cycle_through(["a", "b", "c"], edges) == ["a", "b", "c", "a"]
    assert describe(["a", "b", "a"], lambda x, y: f"{x}{y}") == "  a -> b: ab\n  b -> a: ba"
