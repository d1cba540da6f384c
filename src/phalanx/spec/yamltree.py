"""YAML text -> a small tree of nodes that remember where they were written.

PyYAML's composer gives every node a position, but expanding its aliases naively lets a
"billion laughs" document eat all memory. We compose (cheap: an alias is a shared node), then copy
into our own tree under a node budget and a depth limit, so every document is either refused
quickly or held in bounded memory. Scalars are converted here (never through PyYAML's constructors,
which may raise arbitrary exceptions on odd tags); merge keys (`<<: *base`) are honoured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from phalanx.errors import Problem

MAX_NODES = 20_000  # a real experiment file has a few hundred
MAX_DEPTH = 64

_T = "tag:yaml.org,2002:"
_CONSTRUCTOR = SafeConstructor()


@dataclass(frozen=True)
class Mark:
    """1-based line and column."""

    line: int
    column: int


@dataclass
class YScalar:
    value: Any  # str, int, float, bool or None
    mark: Mark
    raw: str = ""  # the source text of the scalar, as written (quotes and line breaks included)
    style: str | None = None  # None (plain), "'", '"', "|", ">"


@dataclass
class YSeq:
    items: list[YNode]
    mark: Mark


@dataclass
class YKey:
    name: str
    mark: Mark


@dataclass
class YMap:
    items: list[tuple[YKey, YNode]]
    mark: Mark
    index: dict[str, YNode] = field(default_factory=dict)

    def get(self, name: str) -> YNode | None:
        return self.index.get(name)

    def key(self, name: str) -> YKey | None:
        for k, _ in self.items:
            if k.name == name:
                return k
        return None


YNode = YScalar | YSeq | YMap


class TreeError(Exception):
    """A document we refuse outright (bomb, recursion, syntax); carries the problems found so far."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def mark_of(m: Any) -> Mark:
    """Our 1-based Mark from PyYAML's (pure-Python or libyaml) 0-based one."""
    if m is None:
        return Mark(1, 1)
    return Mark(m.line + 1, m.column + 1)


def compose(text: str, filename: str) -> tuple[YNode | None, list[Problem]]:
    """Parse one YAML document. Returns (tree or None when empty, problems found while converting).

    Raises TreeError for documents that cannot be read at all.
    """
    too_many = _count_nodes_fast(text)
    if too_many is not None:
        raise TreeError([_p(filename, too_many, "", _TOO_MANY)])
    loader: _CountingLoader | None = None
    try:
        loader = _CountingLoader(text)
        node = loader.get_single_node()
    except _TooManyNodes as exc:
        raise TreeError([_p(filename, exc.mark, "", _TOO_MANY)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = mark_of(exc.problem_mark or exc.context_mark)
        what = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem:
            where = ""
            if exc.context_mark is not None and exc.problem_mark is not None:
                start = mark_of(exc.context_mark)
                if start != mark:
                    where = f" (started at line {start.line}, column {start.column})"
            what = f"{exc.context}{where}: {exc.problem}"
        raise TreeError([_p(filename, mark, "", f"YAML syntax error: {what}")]) from None
    except yaml.YAMLError as exc:  # ReaderError (control characters) and friends
        mark, what = Mark(1, 1), str(exc)
        if isinstance(exc, yaml.reader.ReaderError):
            mark = _offset_mark(text, exc.position)
            what = f"character {chr(exc.character)!r} is not allowed in YAML (a control character?)"
        raise TreeError([_p(filename, mark, "", f"not readable as YAML: {what}")]) from None
    except RecursionError:
        raise TreeError([_p(filename, Mark(1, 1), "", "YAML nested too deeply to read")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        return None, []
    walker = _Walker(text, filename)
    return walker.convert(node, 0, ""), walker.problems


_TOO_MANY = f"more than {MAX_NODES} values in one file; an experiment file has a few hundred, refused"


class _TooManyNodes(Exception):
    def __init__(self, mark: Mark) -> None:
        super().__init__("too many nodes")
        self.mark = mark


class _CountingLoader(yaml.SafeLoader):
    """Stops composing once a document holds more nodes than any experiment file could."""

    nodes = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _TooManyNodes(mark_of(self.peek_event().start_mark))  # type: ignore[no-untyped-call]
        return super().compose_node(parent, index)


def _count_nodes_fast(text: str) -> Mark | None:
    """Where a document passes MAX_NODES, found with libyaml's event stream when it is there.

    Streaming events holds nothing in memory, and C is about 50 times faster than the pure-Python
    composer, so a 1 MiB file of a million tiny values is refused in a fraction of a second.
    Syntax errors are left to the pure-Python pass, whose messages we show.
    """
    loader_class = getattr(yaml, "CSafeLoader", None)
    if loader_class is None:
        return None
    loader = loader_class(text)
    count = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.NodeEvent):
                count += 1
                if count > MAX_NODES:
                    return mark_of(event.start_mark)
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()
    return None


def _tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_T) if tag.startswith(_T) else tag


def _offset_mark(text: str, offset: int) -> Mark:
    before = text[:offset]
    line = before.count("\n") + 1
    return Mark(line, offset - (before.rfind("\n") + 1) + 1)


def _p(filename: str, mark: Mark, path: str, message: str) -> Problem:
    return Problem(message=message, path=path, file=filename, line=mark.line, column=mark.column)


class _Walker:
    """Copies a composed node graph into YNodes, counting every node it creates (aliases included)."""

    def __init__(self, text: str, filename: str) -> None:
        self.text = text
        self.filename = filename
        self.count = 0
        self.on_path: set[int] = set()
        self.problems: list[Problem] = []

    def fatal(self, node: Node, path: str, message: str) -> TreeError:
        return TreeError([*self.problems, _p(self.filename, mark_of(node.start_mark), path, message)])

    def convert(self, node: Node, depth: int, path: str) -> YNode:
        self.count += 1
        if self.count > MAX_NODES:
            raise self.fatal(
                node,
                path,
                f"the document expands to more than {MAX_NODES} values (YAML aliases used as a "
                "'billion laughs' bomb?); refused",
            )
        if depth > MAX_DEPTH:
            raise self.fatal(node, path, f"nested more than {MAX_DEPTH} levels deep; refused")
        if id(node) in self.on_path:
            raise self.fatal(node, path, "a YAML alias refers to a value that contains it (recursive alias)")
        mark = mark_of(node.start_mark)
        if isinstance(node, ScalarNode):
            return self.scalar(node, mark, path)
        self.on_path.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                self.check_tag(node, _T + "seq", path)
                return YSeq(
                    [self.convert(n, depth + 1, f"{path}[{i}]") for i, n in enumerate(node.value)], mark
                )
            assert isinstance(node, MappingNode)
            self.check_tag(node, _T + "map", path)
            return self.mapping(node, mark, depth, path)
        finally:
            self.on_path.discard(id(node))

    def check_tag(self, node: Node, expected: str, path: str) -> None:
        if node.tag != expected:
            self.problems.append(
                _p(self.filename, mark_of(node.start_mark), path, f"unsupported YAML tag {_tag(node.tag)}")
            )

    def scalar(self, node: ScalarNode, mark: Mark, path: str) -> YScalar:
        raw = self.text[node.start_mark.index : node.end_mark.index]
        tag = node.tag
        value: Any = node.value
        try:
            if tag == _T + "str":
                value = node.value
            elif tag == _T + "int":
                value = _CONSTRUCTOR.construct_yaml_int(node)
            elif tag == _T + "float":
                value = _CONSTRUCTOR.construct_yaml_float(node)  # .inf/.nan: validators refuse them
            elif tag == _T + "bool":
                value = _CONSTRUCTOR.construct_yaml_bool(node)
            elif tag == _T + "null":
                value = None
            elif tag == _T + "timestamp":
                value = node.value  # dates stay text: they are labels here, not times
            else:
                self.problems.append(_p(self.filename, mark, path, f"unsupported YAML tag {_tag(tag)}"))
        except Exception:  # PyYAML raises ValueError & co. on e.g. `!!int abc`
            self.problems.append(_p(self.filename, mark, path, f"{node.value!r} is not a valid {_tag(tag)}"))
            value = node.value
        return YScalar(value, mark, raw, node.style)

    def mapping(self, node: MappingNode, mark: Mark, depth: int, path: str) -> YMap:
        merged: list[tuple[YKey, YNode]] = []
        explicit: list[tuple[YKey, YNode]] = []
        first: dict[str, Mark] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag == _T + "merge":
                merged.extend(self.merge_source(value_node, depth, path))
                continue
            key_mark = mark_of(key_node.start_mark)
            if not isinstance(key_node, ScalarNode):
                self.problems.append(_p(self.filename, key_mark, path, "a key must be plain text"))
                continue
            name = str(key_node.value)
            sub = f"{path}.{name}" if path else name
            if name in first:
                m = first[name]
                self.problems.append(
                    _p(self.filename, key_mark, sub, f"duplicate key (first given at line {m.line})")
                )
                continue
            first[name] = key_mark
            explicit.append((YKey(name, key_mark), self.convert(value_node, depth + 1, sub)))
        items = [(k, v) for k, v in merged if k.name not in first]
        seen: set[str] = set()
        deduped: list[tuple[YKey, YNode]] = []
        for k, v in reversed(items):  # in `<<: [*a, *b]` the first source wins, as YAML says
            if k.name not in seen:
                seen.add(k.name)
                deduped.append((k, v))
        result = YMap([*reversed(deduped), *explicit], mark)
        result.index = {k.name: v for k, v in result.items}
        return result

    def merge_source(self, node: Node, depth: int, path: str) -> list[tuple[YKey, YNode]]:
        sources = node.value if isinstance(node, SequenceNode) else [node]
        out: list[tuple[YKey, YNode]] = []
        for source in reversed(sources):
            converted = self.convert(source, depth + 1, path)
            if not isinstance(converted, YMap):
                self.problems.append(
                    _p(self.filename, mark_of(source.start_mark), path, "`<<` must merge a mapping")
                )
                continue
            out.extend(converted.items)
        return out


def is_null(node: YNode) -> bool:
    """`key:` with nothing after it, or `key: null`: treated as if the key were absent."""
    return isinstance(node, YScalar) and node.value is None


def plain(node: YNode) -> Any:
    """The Python value of a tree (dicts, lists, scalars), for free-form sections like params."""
    if isinstance(node, YScalar):
        return node.value
    if isinstance(node, YSeq):
        return [plain(n) for n in node.items]
    return {k.name: plain(v) for k, v in node.items}
