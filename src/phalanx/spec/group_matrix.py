"""A group's `matrix`: each parameter's distribution (values, range, uniform, ...) read and checked
with its position in the file, in both the list and the 'a:b:c' forms."""

from __future__ import annotations

import math
from typing import Any

from phalanx.spec.errors import Collector, describe, did_you_mean, join
from phalanx.spec.group_model import (
    DISTRIBUTIONS,
    MAX_GRID,
    Distribution,
    _num,
)
from phalanx.spec.yamltree import Mark, YMap, YNode, YScalar, YSeq, is_null, plain


def _matrix_mark(m: YMap, name: str) -> YNode | Mark:
    matrix = m.get("matrix")
    if isinstance(matrix, YMap):
        k = matrix.key(name)
        if k is not None:
            return k.mark
    return m.mark


def _budget_mark(m: YMap) -> YNode | Mark:
    """Where hyperband's `resource: {name: ...}` is written (the search's node if not found)."""
    search = m.get("hyperband")
    resource = search.get("resource") if isinstance(search, YMap) else None
    name = resource.get("name") if isinstance(resource, YMap) else None
    found = name or resource or search
    return found.mark if found is not None else m.mark


def _read_matrix(c: Collector, m: YMap) -> tuple[Distribution, ...] | None:
    node = m.get("matrix")
    if node is None or is_null(node):
        c.add(
            m,
            "hptuning.matrix",
            "missing; give the params to search, e.g. matrix: {lr: {uniform: 0.001:0.1}}",
        )
        return None
    mm = c.mapping(node, "hptuning.matrix")
    if mm is None:
        return None
    if not mm.items:
        c.add(mm, "hptuning.matrix", "is empty; give at least one param to search")
        return None
    out: list[Distribution] = []
    for key, value in mm.items:
        d = _read_distribution(c, key.name, value, join("hptuning.matrix", key.name))
        if d is not None:
            out.append(d)
    return tuple(out) if len(out) == len(mm.items) else None


def _read_distribution(c: Collector, name: str, node: YNode, path: str) -> Distribution | None:
    dm = c.mapping(node, path)
    if dm is None:
        return None
    if len(dm.items) != 1:
        c.add(dm, path, "give exactly one distribution, e.g. {uniform: 0:1} or {values: [1, 2, 3]}")
        return None
    key, arg = dm.items[0]
    kind = key.name
    sub = join(path, kind)
    if kind not in DISTRIBUTIONS:
        c.add(
            key,
            sub,
            f"unknown distribution '{kind}'{did_you_mean(kind, DISTRIBUTIONS)} (expected one of: "
            + ", ".join(DISTRIBUTIONS)
            + ")",
        )
        return None
    if kind == "values":
        seq = c.sequence(arg, sub)
        if seq is None:
            return None
        vals = [plain(v) for v in seq.items]
        if not vals:
            c.add(seq, sub, "is empty; give at least one value")
            return None
        for v, item in zip(vals, seq.items, strict=True):
            if not (v is None or isinstance(v, bool | int | float | str)):
                c.add(item, sub, f"expected a number, text or boolean, got {describe(item)}")
                return None
        return Distribution(name, kind, choices=tuple(vals))
    if kind == "pvalues":
        return _read_pvalues(c, name, arg, sub)
    names = DISTRIBUTIONS[kind]
    nums = _numbers(c, arg, sub, names)
    if nums is None:
        return None
    args = dict(zip(names, nums, strict=True))
    return _validated(c, name, kind, args, arg, sub)


def _read_pvalues(c: Collector, name: str, arg: YNode, sub: str) -> Distribution | None:
    seq = c.sequence(arg, sub)
    if seq is None:
        return None
    choices: list[Any] = []
    weights: list[float] = []
    for i, item in enumerate(seq.items):
        if not isinstance(item, YSeq) or len(item.items) != 2 or not isinstance(item.items[1], YScalar):
            c.add(item, join(sub, i), f"expected a [value, probability] pair, got {describe(item)}")
            return None
        w = item.items[1].value
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= 1:
            c.add(
                item.items[1],
                join(sub, i),
                f"a probability is a number from 0 to 1, got {describe(item.items[1])}",
            )
            return None
        choices.append(plain(item.items[0]))
        weights.append(float(w))
    if not choices:
        c.add(seq, sub, "is empty; give at least one [value, probability] pair")
        return None
    if abs(sum(weights) - 1) > 1e-6:
        c.add(seq, sub, f"the probabilities add up to {sum(weights):g}; they must add up to 1")
        return None
    return Distribution(name, "pvalues", choices=tuple(choices), weights=tuple(weights))


def _numbers(c: Collector, node: YNode, path: str, names: tuple[str, ...]) -> list[float] | None:
    """[a, b, c], 'a:b:c' or {name: value}: the numbers in ``names`` order."""
    form = f"[{', '.join(names)}] or '{':'.join(names)}'"
    raw: list[Any]
    if isinstance(node, YScalar) and (isinstance(node.value, str) or ":" in node.raw):
        # `1:0` unquoted is a YAML 1.1 base-60 number (60): the text as written is what was meant
        text = node.value if isinstance(node.value, str) else node.raw.strip()
        raw = [p.strip() for p in text.split(":")]
    elif isinstance(node, YSeq):
        raw = [plain(v) for v in node.items]
    elif isinstance(node, YMap):
        unknown = [k for k, _ in node.items if k.name not in names]
        for k in unknown:
            c.add(
                k,
                join(path, k.name),
                f"unknown key{did_you_mean(k.name, names)} (allowed here: {', '.join(names)})",
            )
        if unknown:
            return None
        missing = [n for n in names if node.get(n) is None]
        if missing:
            c.add(node, path, f"missing {', '.join(missing)}; expected {form}")
            return None
        raw = [plain(node.get(n)) for n in names]  # type: ignore[arg-type]
    else:
        c.add(node, path, f"expected {form}, got {describe(node)}")
        return None
    if len(raw) != len(names):
        c.add(node, path, f"expected {len(names)} numbers, {form}; got {len(raw)}")
        return None
    out: list[float] = []
    for n, v in zip(names, raw, strict=True):
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                c.add(node, path, f"{n} {v!r} is not a number; expected {form}")
                return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            c.add(node, path, f"{n} is not a number; expected {form}")
            return None
        out.append(float(v))
    return out


def _validated(
    c: Collector, name: str, kind: str, args: dict[str, float], node: YNode, path: str
) -> Distribution | None:
    def bad(message: str) -> None:
        c.add(node, path, message)

    if "low" in args and args["low"] >= args["high"]:
        bad(f"bounds reversed or equal: low {_num(args['low'])} must be below high {_num(args['high'])}")
        return None
    if "scale" in args and args["scale"] <= 0:
        bad(f"scale must be more than 0, got {_num(args['scale'])}")
        return None
    if "q" in args and args["q"] <= 0:
        bad(f"q (the step values are rounded to) must be more than 0, got {_num(args['q'])}")
        return None
    if kind.endswith("loguniform") and 0 < args["low"] < args["high"] <= 1:
        # Polyaxon's (and Azure's) bounds are natural logs: [0.0001, 0.1] draws 1.0001..1.105, which
        # is surely not the learning rate meant; a note, not an error, since it is a valid search
        low, high = args["low"], args["high"]
        q = f", {_num(args['q'])}" if "q" in args else ""
        c.note(
            node,
            path,
            f"the bounds are natural logs, so this draws from exp({_num(low)}) = {math.exp(low):.4g}"
            f" to exp({_num(high)}) = {math.exp(high):.4g}; for values from {_num(low)} to {_num(high)}"
            f" write {kind}: [{math.log(low):.4g}, {math.log(high):.4g}{q}]",
        )
    choices: tuple[Any, ...] = ()
    if kind == "range":
        start, stop, step = args["start"], args["stop"], args["step"]
        if step == 0:
            bad("step must not be 0")
            return None
        if (stop - start) / step <= 0:
            bad(f"bounds reversed: range from {_num(start)} to {_num(stop)} by {_num(step)} is empty")
            return None
        if (stop - start) / step > MAX_GRID:
            bad(f"range has more than {MAX_GRID} values")
            return None
        count = math.ceil((stop - start) / step)  # numpy.arange's length: stop excluded
        choices = tuple(_clean(start + i * step) for i in range(count))
        if all(float(x).is_integer() for x in (start, stop, step)):
            choices = tuple(int(v) for v in choices)
    elif kind in ("linspace", "logspace", "geomspace"):
        num = args["num"]
        if not num.is_integer() or num < 1 or num > MAX_GRID:
            bad(f"num (how many values) must be a whole number from 1 to {MAX_GRID}, got {_num(num)}")
            return None
        start, stop = args["start"], args["stop"]
        if start >= stop:
            bad(f"bounds reversed or equal: start {_num(start)} must be below stop {_num(stop)}")
            return None
        if kind == "geomspace" and start <= 0:
            bad(f"geomspace needs positive bounds, got start {_num(start)}")
            return None
        choices = tuple(_clean(v) for v in _spaced(kind, start, stop, int(num)))
    return Distribution(name, kind, args=args, choices=choices)


def _spaced(kind: str, start: float, stop: float, num: int) -> list[float]:
    """numpy's linspace, logspace (base 10) and geomspace, without numpy (not a base dependency)."""
    if kind == "geomspace":
        start, stop = math.log10(start), math.log10(stop)
    points = [start + (stop - start) * i / (num - 1) for i in range(num)] if num > 1 else [start]
    return points if kind == "linspace" else [10.0**p for p in points]


def _clean(v: Any) -> float:
    """A float as the shortest Python float that prints well (0.1, not 0.10000000000000002)."""
    return float(f"{float(v):.12g}")
