"""The documented Run API, one surface on both doors: ``RunAPI`` is what ``Experiment.submit``
returns, whether the experiment runs on this machine (``phalanx.runs.Run``, read from the store) or
on a server (``phalanx.estimators.remote.RemoteRun``, read through the REST API). mypy checks that
both classes satisfy it (``phalanx.estimators.remote``), so a method added to one door and not the
other fails `make typecheck`.

The parts both doors compute the same way (which stored file a name means, where a download goes,
a saved model's JSON, which model ``register_model(model_path=...)`` names) are the pure functions
here, so the two answers cannot drift apart.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from phalanx.domain import Experiment, Replica
from phalanx.errors import NotFound, UsageError

Metrics = dict[str, dict[str, dict[str, list[float]]]]


class RunAPI(Protocol):
    """One experiment, as Azure's Run: status, details, metrics, files, logs, models, cancel."""

    @property
    def id(self) -> str: ...

    def get_status(self) -> str: ...

    def get_details(self) -> dict[str, Any]: ...

    def get_metrics(self, title: str | None = None) -> Metrics: ...

    def get_models(self) -> list[dict[str, Any]]: ...

    def get_file_names(self) -> list[str]: ...

    def download_file(self, name: str, output_file_path: str | os.PathLike[str] | None = None) -> Path: ...

    def get_logs(self, replica: str | None = None) -> list[str]: ...

    def register_model(
        self,
        model_name: str,
        model_path: str | None = None,
        *,
        description: str | None = None,
        tags: Mapping[str, str] | None = None,
        alias: str | None = None,
    ) -> dict[str, Any]: ...

    def cancel(self, timeout: float = 60.0) -> str: ...

    def wait_for_completion(
        self,
        show_output: bool = False,
        raise_on_error: bool = True,
        timeout: float | None = None,
        *,
        output: IO[str] | None = None,
    ) -> dict[str, Any]: ...


def details_json(e: Experiment, replicas: Sequence[Replica], now: float) -> dict[str, Any]:
    """``get_details()``: status, times, reason, topology and every replica's state and exit code."""
    end = e.finished_at or (now if e.started_at else None)
    return {
        **e.to_json(),
        "duration": (end - e.started_at) if end and e.started_at else None,
        "replicas": [r.to_json() for r in replicas],
    }


def metrics_json(found: Mapping[str, Mapping[str, Any]]) -> Metrics:
    """``get_metrics()``: a store's series (``.steps``, ``.values``) by title and series name."""
    return {
        t: {s: {"steps": list(v.steps), "values": list(v.values)} for s, v in series.items()}
        for t, series in found.items()
    }


def models_json(models: Iterable[Any]) -> list[dict[str, Any]]:
    """``get_models()``: a store's model records (``ModelRecord``), each as ``saved_model_json``."""
    return [saved_model_json(m.name, m.format, m.path, m.size, m.replica, m.metadata) for m in models]


def saved_model_json(
    name: str, format: str, path: str, size: int, replica: str, metadata: Mapping[str, Any]
) -> dict[str, Any]:
    """One entry of ``get_models()``: a model the run saved (task.save_model)."""
    return {
        "name": name,
        "format": format,
        "path": path,
        "size": size,
        "replica": replica,
        "metadata": dict(metadata),
    }


def resolve_file(run_id: str, name: str, names: Sequence[str], named: Iterable[tuple[str, str]]) -> str:
    """The stored path ``name`` means: a path of ``names`` (get_file_names) as it is, else the path
    of an artifact or model called ``name`` (``named``: (name, path) pairs). Raises NotFound."""
    if name in names:
        return name
    for record_name, path in named:
        if record_name == name and path in names:
            return path
    raise NotFound(f"run {run_id} has no file {name!r}; files: {', '.join(names) if names else 'none yet'}")


def download_target(path: str, output_file_path: str | os.PathLike[str] | None) -> Path:
    """Where download_file writes ``path``: ``output_file_path`` (a file path, or an existing folder
    to put it in), default the current folder."""
    target = Path(output_file_path) if output_file_path is not None else Path.cwd()
    if target.is_dir():
        target = target / Path(path).name
    return target


def write_whole(target: Path, chunks: Iterable[bytes]) -> Path:
    """Write ``chunks`` to ``target`` through a temporary name: a download cut short leaves no
    half-written file under the name asked for."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.part")
    try:
        with tmp.open("wb") as out:
            for chunk in chunks:
                out.write(chunk)
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def register_source(run_id: str, model_path: str | None, models: Sequence[Mapping[str, Any]]) -> str:
    """The registry's ``EXPERIMENT[/MODEL]`` for ``register_model(model_path=...)``: None is the
    run's one ONNX model; else a saved model's path (as get_file_names lists it), name or model
    name (``get_models()``'s entries). Raises UsageError naming the run's models."""
    if model_path is None:
        return run_id
    for m in models:
        model = str(m.get("metadata", {}).get("model", m["name"]))
        if model_path in (m["path"], m["name"], model):
            return f"{run_id}/{m['name']}"
    saved = ", ".join(str(m["path"]) for m in models) or "none"
    raise UsageError(
        f"register_model: run {run_id} saved no model at {model_path!r} (saved models: {saved}); "
        "give a path from get_models() or leave model_path out for its only ONNX model"
    )
