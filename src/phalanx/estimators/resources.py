"""The estimator's ``resources=`` argument -> a domain Resources (cpu cores, memory MiB, gpu count).

The file form always writes ``{requests, limits}``; in Python a plain value is the common case, so a
scalar means requests = limits = that value (what Kubernetes calls a guaranteed request). Quantities
read the way the file reads them: cpu as cores or "500m", memory as MiB or "512Mi" / "2Gi" / "1G".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from phalanx.domain import Range, Resources
from phalanx.errors import Problem
from phalanx.spec.quantities import parse_cpu, parse_gpu, parse_memory

_KEYS = ("cpu", "memory", "gpu")
_RANGE = ("requests", "limits")


def _parser(parse: Callable[[object], float]) -> Callable[[Any], tuple[float | None, str | None]]:
    def run(value: Any) -> tuple[float | None, str | None]:
        try:
            return parse(value), None
        except ValueError as exc:
            return None, str(exc)

    return run


_PARSERS = {"cpu": _parser(parse_cpu), "memory": _parser(parse_memory), "gpu": _parser(parse_gpu)}


def parse_resources(value: Any, param: str = "resources") -> tuple[Resources | None, list[Problem]]:
    """Returns the Resources (None when nothing was given) and the problems found, each naming where."""
    if value is None:
        return None, []
    if isinstance(value, Resources):
        return value, []
    if not isinstance(value, Mapping):
        return None, [
            Problem(
                f"expected a dict like {{'cpu': 2, 'memory': '2Gi', 'gpu': 1}}, got {type(value).__name__}",
                param,
            )
        ]
    problems: list[Problem] = []
    ranges: dict[str, Range] = {}
    for key, raw in value.items():
        if key not in _KEYS:
            problems.append(Problem(f"unknown key {key!r}; use one of cpu, memory, gpu", param))
            continue
        parse = _PARSERS[key]
        where = f"{param}.{key}"
        if isinstance(raw, Mapping):
            unknown = set(raw) - {"requests", "limits"}
            if unknown:
                problems.append(Problem(f"unknown key(s) {sorted(unknown)}; use requests and limits", where))
                continue
            parsed = {
                k: parse(raw[k]) if raw.get(k) is not None else (None, None) for k in ("requests", "limits")
            }
            req, lim = parsed["requests"][0], parsed["limits"][0]
            errors = [f"{k}: {e}" for k, (_, e) in parsed.items() if e]
        else:
            req, error = parse(raw)
            lim = req
            errors = [error] if error else []
        if errors:
            problems.append(Problem("; ".join(errors), where))
            continue
        if req is not None and lim is not None and lim < req:
            problems.append(Problem(f"limits ({lim:g}) are below requests ({req:g}); raise limits", where))
            continue
        ranges[key] = Range(requests=req, limits=lim)
    if problems:
        return None, problems
    return Resources(**ranges), []


def with_gpus(resources: Resources | None, count: int) -> Resources:
    """``resources`` with a gpu request of ``count`` unless the user set one explicitly."""
    base = resources or Resources()
    if base.gpu.requests is not None or base.gpu.limits is not None:
        return base
    return Resources(cpu=base.cpu, memory=base.memory, gpu=Range(requests=count, limits=count))
