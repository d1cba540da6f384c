"""``task.save_checkpoint`` / ``latest_checkpoint`` / ``load_checkpoint`` (see phalanx.checkpoints).

A checkpoint is written into the spool (a file slot, like an uploaded artifact) and its ARTIFACT
event (kind ``checkpoint``: step, metrics, policy) is made durable before the call returns, so a
replica killed right after still leaves it for the restarted one. torch objects are written with
``torch.save`` when torch is already imported by the script (never imported here), a path is copied
as it is, anything else is pickled. Standard library only.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import shutil
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.checkpoints import ENV_POLICY, ENV_RESUME, ENV_RESUME_STEP, KIND, Checkpoint, Policy, PolicyError
from phalanx.errors import UsageError
from phalanx.tracking.identity import home

if TYPE_CHECKING:
    from phalanx.tracking.task import Task


def _policy(overrides: Mapping[str, Any]) -> Policy:
    base: dict[str, Any] = {}
    raw = os.environ.get(ENV_POLICY)
    if raw:
        try:
            base = dict(json.loads(raw))
        except (ValueError, TypeError):
            base = {}
    base.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Policy.parse(base, "save_checkpoint")
    except PolicyError as exc:
        raise UsageError(str(exc)) from None


def _metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in (metrics or {}).items():
        try:
            out[str(k)] = float(v)
        except (TypeError, ValueError):
            raise UsageError(f"save_checkpoint: metric {k!r} is {v!r}, not a number") from None
    return out


def save(
    task: Task,
    obj_or_path: Any,
    step: int,
    metrics: Mapping[str, Any] | None = None,
    **policy: Any,
) -> Checkpoint:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise UsageError(f"save_checkpoint: step must be a whole number >= 0, got {step!r}")
    chosen = _policy(policy)
    values = _metrics(metrics)
    _warn_unscored(task, chosen, values)
    reporter = task._reporter
    replica = task.replica
    if isinstance(obj_or_path, str | os.PathLike):
        source = Path(obj_or_path).expanduser()
        if not source.exists():
            raise UsageError(
                f"save_checkpoint: {str(obj_or_path)!r} does not exist; pass a path or an object"
            )
        filename = f"step-{step:09d}-{source.name}"
        rel, target = reporter.file_slot(filename)
        target.parent.mkdir(parents=True, exist_ok=True)

        if source.is_dir():
            shutil.copytree(source, target)
            size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        else:
            shutil.copyfile(source, target)
            size = target.stat().st_size
        content_type = "application/octet-stream"
    else:
        torch = sys.modules.get("torch")
        ext = ".pt" if torch is not None else ".pkl"
        filename = f"step-{step:09d}{ext}"
        rel, target = reporter.file_slot(filename)
        target.parent.mkdir(parents=True, exist_ok=True)
        if torch is not None:
            torch.save(obj_or_path, str(target))
        else:
            with open(target, "wb") as fh:
                pickle.dump(obj_or_path, fh)
        size = target.stat().st_size
        content_type = "application/x-pytorch" if torch is not None else "application/python-pickle"
    name = f"checkpoint-{step}"
    path = f"checkpoints/{replica}/{filename}"
    reporter.event(
        "artifact",
        {
            "name": name,
            "kind": KIND,
            "path": path,
            "size": size,
            "content_type": content_type,
            "metadata": {"step": step, "metrics": values, "policy": chosen.to_json()},
            "spool_path": rel,
        },
    )
    reporter.flush(wait=False)  # durable in the spool before we return: a kill now loses nothing
    ckpt = Checkpoint(name, step, str(target), values, replica, time.time(), size)
    task._checkpoints.append((ckpt, path))
    return ckpt


def _warn_unscored(task: Task, policy: Policy, values: Mapping[str, float]) -> None:
    """Say once per process when ``keep_best`` ranks by a metric this checkpoint does not report:
    such a checkpoint can never count among the best, so the policy would silently keep only the
    latest ones (a typo in the metric's name, or metrics forgotten in the call)."""
    if not policy.keep_best or not policy.metric or policy.metric in values:
        return
    if task._warned_unscored:
        return
    task._warned_unscored = True

    reported = ", ".join(sorted(values)) or "none"
    warnings.warn(
        f"phalanx: the checkpoint policy keeps the best {policy.keep_best} by {policy.metric!r}, but "
        f"save_checkpoint got no {policy.metric!r} in metrics (reported: {reported}); this "
        f"checkpoint can never be among the best: pass metrics={{{policy.metric!r}: ...}}",
        stacklevel=4,
    )


def _artifact_root() -> Path | None:
    url = os.environ.get("PHALANX_ARTIFACTS_URL")
    if url and "://" in url and not url.startswith("file://"):
        return None
    if url:
        return Path(url.removeprefix("file://"))

    return home() / "artifacts"


def _where(task: Task, ckpt: Checkpoint, store_path: str) -> str:
    """Where a checkpoint saved by this process is now: its spool slot until ingest moves it."""
    if Path(ckpt.path).exists():
        return ckpt.path
    root = _artifact_root()
    if root is not None and (root / task.id / store_path).exists():
        return str(root / task.id / store_path)
    return ckpt.path


def latest(task: Task) -> Checkpoint | None:
    """The latest checkpoint: the newest this process saved, else the one the launcher named
    (PHALANX_RESUME_CHECKPOINT: the latest of an earlier attempt), else None."""
    if task._checkpoints:
        ckpt, store_path = max(task._checkpoints, key=lambda c: (c[0].step, c[0].time))
        return Checkpoint(
            ckpt.name,
            ckpt.step,
            _where(task, ckpt, store_path),
            ckpt.metrics,
            ckpt.replica,
            ckpt.time,
            ckpt.size,
        )
    path = os.environ.get(ENV_RESUME, "").strip()
    if not path:
        return None
    step = os.environ.get(ENV_RESUME_STEP, "").strip()
    metrics: dict[str, float] = {}
    raw = os.environ.get("PHALANX_RESUME_METRICS")
    if raw:
        try:
            metrics = {str(k): float(v) for k, v in json.loads(raw).items()}
        except (ValueError, TypeError, AttributeError):
            metrics = {}
    return Checkpoint(f"checkpoint-{step}", int(step) if step.isdigit() else 0, path, metrics)


def load(
    task: Task, checkpoint: Checkpoint | str | os.PathLike[str] | None = None, **torch_kwargs: Any
) -> Any:
    """The object of a checkpoint (default: the latest): torch.load for .pt files (torch must be
    installed), pickle for .pkl, the path itself for a file or folder saved as a path. None when
    there is no checkpoint; FileNotFoundError when its file is gone."""
    if checkpoint is None:
        checkpoint = latest(task)
        if checkpoint is None:
            return None
    path = Path(checkpoint.path if isinstance(checkpoint, Checkpoint) else checkpoint)
    if not path.exists():
        # a Path handed back here would fail later, far from the cause (`state["epoch"]` on a Path)
        what = "checkpoint"
        if isinstance(checkpoint, Checkpoint):
            what = f"{checkpoint.name} (step {checkpoint.step})"
        raise FileNotFoundError(
            f"load_checkpoint: the file of {what} is gone: {path} (a retention policy or a clean-up "
            "removed it?); task.latest_checkpoint() names the newest one saved"
        )
    if path.suffix == ".pt" and path.is_file():
        torch = importlib.import_module("torch")
        torch_kwargs.setdefault("weights_only", False)
        return torch.load(str(path), **torch_kwargs)
    if path.suffix == ".pkl" and path.is_file():
        with open(path, "rb") as fh:
            return pickle.load(fh)
    return path
