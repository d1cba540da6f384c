"""Checkpoints: a kind of artifact with a step and metrics, kept by a retention policy.

``task.save_checkpoint`` stores each checkpoint as an artifact of kind ``checkpoint`` named
``checkpoint-<step>`` whose metadata holds ``step``, ``metrics`` and the ``policy`` in force. When
the store records one, it applies that policy to the experiment's checkpoints (``retain``): the rows
of those not kept are removed in the same transaction and their files right after. A restarted or
resumed replica is told the latest one through PHALANX_RESUME_CHECKPOINT (a local path) and
PHALANX_RESUME_STEP. Standard library only (the SDK copy ships it).

Policy (the file's ``run.checkpoints``, the estimator's ``checkpoint_policy``, or keyword arguments
of ``save_checkpoint``)::

    keep_last: 3          # the 3 latest steps (default: all)
    keep_best: 1          # plus the best 1 by `metric`
    metric: accuracy
    mode: max             # or min (default: min for names containing "loss", else max)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KIND = "checkpoint"
ENV_POLICY = "PHALANX_CHECKPOINT_POLICY"
ENV_RESUME = "PHALANX_RESUME_CHECKPOINT"
ENV_RESUME_STEP = "PHALANX_RESUME_STEP"
POLICY_KEYS = ("keep_last", "keep_best", "metric", "mode")


class PolicyError(ValueError):
    """A policy that cannot be applied: every ``problems`` entry names a key (``path``) and says
    what to do (``message``); ``path`` and ``message`` are the first's."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        self.path, self.message = self.problems[0]
        super().__init__("; ".join(f"{path}: {message}" for path, message in self.problems))


@dataclass(frozen=True)
class Policy:
    keep_last: int | None = None
    keep_best: int | None = None
    metric: str | None = None
    mode: str | None = None  # "max" or "min"

    @classmethod
    def parse(cls, value: Mapping[str, Any] | None, where: str = "checkpoints") -> Policy:
        """A policy from a mapping; PolicyError naming ``where.key`` for each thing wrong, all in
        one pass."""
        if not value:
            return cls()
        if not isinstance(value, Mapping):
            raise PolicyError([(where, f"expected a mapping like {{keep_last: 3}}, got {value!r}")])
        problems: list[tuple[str, str]] = []
        unknown = [k for k in value if k not in POLICY_KEYS]
        if unknown:
            problems.append((f"{where}.{unknown[0]}", f"unknown key; use {', '.join(POLICY_KEYS)}"))
        out: dict[str, Any] = {}
        for key in ("keep_last", "keep_best"):
            n = value.get(key)
            if n is None:
                continue
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                problems.append((f"{where}.{key}", f"expected a whole number >= 0, got {n!r}"))
            else:
                out[key] = n
        metric = value.get("metric")
        if metric is not None and (not isinstance(metric, str) or not metric.strip()):
            problems.append((f"{where}.metric", f"expected the name of a reported metric, got {metric!r}"))
        mode = value.get("mode")
        if mode is not None and mode not in ("max", "min"):
            problems.append((f"{where}.mode", f"expected max or min, got {mode!r}"))
        if out.get("keep_best") and metric is None:
            problems.append((f"{where}.keep_best", f"needs {where}.metric: the metric that decides the best"))
        best_refused = value.get("keep_best") is not None and "keep_best" not in out
        if out.get("keep_last") == 0 and not out.get("keep_best") and not best_refused:
            problems.append((f"{where}.keep_last", "0 would keep no checkpoint; give 1 or more"))
        if problems:
            raise PolicyError(problems)
        return cls(out.get("keep_last"), out.get("keep_best"), metric, mode)

    @property
    def active(self) -> bool:
        return self.keep_last is not None or bool(self.keep_best)

    def direction(self) -> str:
        if self.mode:
            return self.mode
        return "min" if self.metric and "loss" in self.metric.lower() else "max"

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in POLICY_KEYS if getattr(self, k) is not None}


@dataclass(frozen=True)
class Checkpoint:
    """One stored checkpoint as the SDK and the CLI see it."""

    name: str
    step: int
    path: str  # a local path (SDK) or the path inside the artifact store (store listings)
    metrics: Mapping[str, float]
    replica: str = "master"
    time: float = 0.0
    size: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "step": self.step,
            "path": self.path,
            "metrics": dict(self.metrics),
            "replica": self.replica,
            "time": self.time,
            "size": self.size,
        }


def _metric(c: Checkpoint, name: str) -> float | None:
    value = c.metrics.get(name)
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def retain(checkpoints: Sequence[Checkpoint], policy: Policy) -> set[str]:
    """Names of the checkpoints the policy keeps: the ``keep_last`` latest steps plus the
    ``keep_best`` best by ``metric`` (ties: the later step). Everything when the policy is empty."""
    if not policy.active:
        return {c.name for c in checkpoints}
    by_step = sorted(checkpoints, key=lambda c: (c.step, c.time))
    keep: set[str] = set()
    if policy.keep_last is None:
        keep |= {c.name for c in by_step}
    elif policy.keep_last:
        # the N latest *steps*: when several ranks save a step, each rank's copy of it is kept
        steps = sorted({c.step for c in by_step})[-policy.keep_last :]
        keep |= {c.name for c in by_step if c.step in steps}
    if policy.keep_best and policy.metric:
        metric = policy.metric
        scored = [c for c in by_step if _metric(c, metric) is not None]
        sign = 1.0 if policy.direction() == "max" else -1.0
        scored.sort(key=lambda c: (sign * (_metric(c, metric) or 0.0), c.step), reverse=True)
        keep |= {c.name for c in scored[: policy.keep_best]}
    return keep


def from_artifacts(artifacts: Iterable[Any]) -> list[Checkpoint]:
    """The checkpoints among an experiment's artifact records (store.artifacts), oldest step first."""
    out = []
    for a in artifacts:
        if a.kind != KIND:
            continue
        meta = a.metadata or {}
        out.append(
            Checkpoint(
                name=a.name,
                step=int(meta.get("step", 0)),
                path=a.path,
                metrics=dict(meta.get("metrics") or {}),
                replica=a.replica,
                time=a.time,
                size=a.size,
            )
        )
    return sorted(out, key=lambda c: (c.step, c.time))


def latest(checkpoints: Sequence[Checkpoint]) -> Checkpoint | None:
    return max(checkpoints, key=lambda c: (c.step, c.time), default=None)


def policy_env(policy: Mapping[str, Any] | None) -> dict[str, str]:
    """The environment that gives every replica the experiment's policy."""
    return {ENV_POLICY: json.dumps(dict(policy))} if policy else {}
