"""The rest of ClearML's ``Logger`` reporting calls, so seed-003-style scripts run unchanged:
``report_single_value``, ``report_vector``, ``report_line_plot``, ``report_scatter2d``,
``report_scatter3d``, ``report_confusion_matrix`` (and its old name ``report_matrix``),
``report_surface`` and ``report_media``.

A single value is a scalar (title NAME, series ``summary``, step 0: the run table's
``metric:last:NAME``); a vector is a histogram, as in ClearML; the plots are plotly figures (a JSON
document each: the same report files as ``report_plotly``, shown on the Debug samples tab), built
here from plain lists (numpy arrays through their own ``tolist``); media is a file of its own.
Standard library only.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.tracking.objects import ArtifactError
from phalanx.tracking.reports import Report, json_report, of_histogram, of_image

if TYPE_CHECKING:
    from phalanx.tracking.task import Task

SUMMARY_SERIES = "summary"  # the series of report_single_value's scalars
MAX_POINTS = 1_000_000  # numbers in one figure: beyond this it is a dataset (upload_artifact)


@dataclass(frozen=True)
class SeriesInfo:
    """One line of ``report_line_plot`` (ClearML's ``SeriesInfo``): its name and (x, y) points."""

    name: str
    data: Any  # N x 2: (x, y) rows
    labels: Sequence[str] | None = field(default=None)


def numbers(values: Any, what: str, width: int | None = None) -> list[list[float]]:
    """Rows of finite numbers (a list of rows or a numpy array), each ``width`` long if given."""
    rows = (
        values.tolist()
        if hasattr(values, "tolist")
        else [list(r) if isinstance(r, Iterable) else r for r in values]
    )
    if not rows:
        raise ArtifactError(f"{what}: no values")
    out: list[list[float]] = []
    for row in rows:
        cells = row if isinstance(row, list | tuple) else [row]
        try:
            parsed = [float(v) for v in cells]
        except (TypeError, ValueError):
            raise ArtifactError(f"{what}: {row!r} holds something that is not a number") from None
        if any(v != v or v in (float("inf"), float("-inf")) for v in parsed):
            raise ArtifactError(f"{what}: values must be finite numbers (no NaN, no infinity)")
        if width is not None and len(parsed) != width:
            raise ArtifactError(f"{what}: each row needs {width} numbers, not {len(parsed)} ({row!r})")
        out.append(parsed)
    if sum(len(r) for r in out) > MAX_POINTS:
        raise ArtifactError(f"{what}: more than {MAX_POINTS} numbers; store a dataset with upload_artifact")
    return out


def figure(
    traces: list[dict[str, Any]], layout: Mapping[str, Any], extra: Mapping[str, Any] | None
) -> dict[str, Any]:
    return {"data": traces, "layout": {**{k: v for k, v in layout.items() if v is not None}, **(extra or {})}}


def _axis(title: str | None, **more: Any) -> dict[str, Any] | None:
    doc = {**({"title": {"text": title}} if title else {}), **more}
    return doc or None


def line_figure(
    series: Sequence[Any], xaxis: str | None, yaxis: str | None, mode: str, reverse_x: bool, extra: Any
) -> dict[str, Any]:
    traces = []
    for s in series:
        name, data = (s.get("name"), s.get("data")) if isinstance(s, Mapping) else (s.name, s.data)
        rows = numbers(data, f"report_line_plot: series {name!r}", width=2)
        traces.append(
            {
                "type": "scatter",
                "mode": mode,
                "name": str(name),
                "x": [r[0] for r in rows],
                "y": [r[1] for r in rows],
            }
        )
    if not traces:
        raise ArtifactError("report_line_plot: give at least one series (SeriesInfo(name, data))")
    x = _axis(xaxis, autorange="reversed") if reverse_x else _axis(xaxis)
    return figure(traces, {"xaxis": x, "yaxis": _axis(yaxis)}, extra)


def scatter_figure(
    points: Any, dims: int, series: str, axes: Sequence[str | None], labels: Any, mode: str, extra: Any
) -> dict[str, Any]:
    what = "report_scatter2d" if dims == 2 else "report_scatter3d"
    rows = numbers(points, what, width=dims)
    trace: dict[str, Any] = {"type": "scatter" if dims == 2 else "scatter3d", "mode": mode, "name": series}
    for i, coordinate in enumerate("xyz"[:dims]):
        trace[coordinate] = [r[i] for r in rows]
    if labels is not None:
        trace["text"] = [str(x) for x in labels]
    names = ("xaxis", "yaxis", "zaxis")
    layout = {names[i]: _axis(t) for i, t in enumerate(axes[:dims])}
    return figure([trace], layout if dims == 2 else {"scene": {k: v for k, v in layout.items() if v}}, extra)


def matrix_figure(
    kind: str,
    values: Any,
    axes: Sequence[str | None],
    xlabels: Any,
    ylabels: Any,
    y_reversed: bool,
    extra: Any,
) -> dict[str, Any]:
    """A heat map (``heatmap``: a confusion matrix) or a 3D ``surface`` of a 2D matrix."""
    rows = numbers(values, "report_confusion_matrix" if kind == "heatmap" else "report_surface")
    if any(len(r) != len(rows[0]) for r in rows):
        raise ArtifactError(f"a {kind}'s rows must all have the same length")
    trace: dict[str, Any] = {"type": kind, "z": rows}
    if xlabels is not None:
        trace["x"] = [str(x) for x in xlabels]
    if ylabels is not None:
        trace["y"] = [str(y) for y in ylabels]
    if kind == "surface":
        scene = {n: _axis(t) for n, t in zip(("xaxis", "yaxis", "zaxis"), axes, strict=False) if t}
        return figure([trace], {"scene": scene or None}, extra)
    y = _axis(axes[1], autorange="reversed") if y_reversed else _axis(axes[1])
    return figure([trace], {"xaxis": _axis(axes[0]), "yaxis": y}, extra)


def of_media(local_path: Any, stream: Any, file_extension: str | None, url: str | None) -> Report:
    """``report_media``'s one source: a file, a stream (bytes or text) or a URL (kept as a link)."""
    given = [x is not None for x in (local_path, stream, url)]
    if sum(given) != 1:
        raise ArtifactError("report_media: give exactly one of local_path=, stream= or url=")
    if url is not None:
        return json_report("media", {"url": str(url)}, {"url": str(url)})
    if local_path is not None:
        path = Path(local_path).expanduser()
        if not path.is_file():
            raise ArtifactError(f"report_media: {str(local_path)!r} is not a file")
        data, extension = path.read_bytes(), path.suffix.lstrip(".").lower()
    else:
        raw = stream.read() if hasattr(stream, "read") else stream
        data = raw.encode() if isinstance(raw, str) else bytes(raw)
        extension = (file_extension or "bin").lstrip(".").lower()
    content = mimetypes.guess_type(f"x.{extension}")[0] or "application/octet-stream"
    if content.startswith("image/"):
        return of_image(image=data) if local_path is None else of_image(local_path=local_path)
    return Report("media", data, content, extension or "bin", {})


class Plots:
    """ClearML's remaining ``Logger`` reports (a mixin of ``Logger``, beside ``DebugSamples``)."""

    if TYPE_CHECKING:  # Logger's, and DebugSamples': what these calls are built on
        _task: Task

        def _store_report(self, title: str, series: str, iteration: int | None, build: Any) -> None: ...

        def report_scalar(
            self, title: str, series: str, value: float, iteration: int | None = None
        ) -> None: ...

    def report_single_value(self, name: str, value: float) -> None:
        """A run's one number (final accuracy, mAP): the scalar NAME, series ``summary``, step 0."""
        self.report_scalar(name, SUMMARY_SERIES, value, 0)

    def report_vector(
        self,
        title: str,
        series: str,
        values: Any,
        iteration: int | None = None,
        labels: Sequence[str] | None = None,
        xlabels: Sequence[str] | None = None,
        xaxis: str | None = None,
        yaxis: str | None = None,
        **_clearml_only: Any,
    ) -> None:
        """Deprecated in ClearML for ``report_histogram``, which it is."""

        def build() -> Report:
            return of_histogram(values, labels, xlabels, xaxis, yaxis)

        self._store_report(title, series, iteration, build)

    def report_line_plot(
        self,
        title: str,
        series: Sequence[Any],
        xaxis: str | None = None,
        yaxis: str | None = None,
        mode: str = "lines",
        iteration: int | None = None,
        reverse_xaxis: bool = False,
        comment: str | None = None,
        extra_layout: Mapping[str, Any] | None = None,
    ) -> None:
        """Lines of (x, y) points, one per ``SeriesInfo(name, data)`` (or ``{"name", "data"}``)."""

        def build() -> Report:
            return _plot(
                line_figure(series, xaxis, yaxis, mode, reverse_xaxis, extra_layout), "line_plot", comment
            )

        self._store_report(title, "lines", iteration, build)

    def report_scatter2d(
        self,
        title: str,
        series: str,
        scatter: Any,
        iteration: int | None = None,
        xaxis: str | None = None,
        yaxis: str | None = None,
        labels: Sequence[str] | None = None,
        mode: str = "lines",
        comment: str | None = None,
        extra_layout: Mapping[str, Any] | None = None,
    ) -> None:
        def build() -> Report:
            doc = scatter_figure(scatter, 2, series, (xaxis, yaxis), labels, mode, extra_layout)
            return _plot(doc, "scatter2d", comment)

        self._store_report(title, series, iteration, build)

    def report_scatter3d(
        self,
        title: str,
        series: str,
        scatter: Any,
        iteration: int | None = None,
        xaxis: str | None = None,
        yaxis: str | None = None,
        zaxis: str | None = None,
        labels: Sequence[str] | None = None,
        mode: str = "markers",
        fill: bool = False,
        comment: str | None = None,
        extra_layout: Mapping[str, Any] | None = None,
    ) -> None:
        def build() -> Report:
            doc = scatter_figure(scatter, 3, series, (xaxis, yaxis, zaxis), labels, mode, extra_layout)
            return _plot(doc, "scatter3d", comment)

        self._store_report(title, series, iteration, build)

    def report_confusion_matrix(
        self,
        title: str,
        series: str,
        matrix: Any,
        iteration: int | None = None,
        xaxis: str | None = None,
        yaxis: str | None = None,
        xlabels: Sequence[str] | None = None,
        ylabels: Sequence[str] | None = None,
        yaxis_reversed: bool = False,
        comment: str | None = None,
        extra_layout: Mapping[str, Any] | None = None,
    ) -> None:
        def build() -> Report:
            axes = (xaxis, yaxis)
            doc = matrix_figure("heatmap", matrix, axes, xlabels, ylabels, yaxis_reversed, extra_layout)
            return _plot(doc, "confusion_matrix", comment)

        self._store_report(title, series, iteration, build)

    def report_matrix(
        self, title: str, series: str, matrix: Any, iteration: int | None = None, **kwargs: Any
    ) -> None:
        """ClearML's older name of ``report_confusion_matrix``."""
        self.report_confusion_matrix(title, series, matrix, iteration, **kwargs)

    def report_surface(
        self,
        title: str,
        series: str,
        matrix: Any,
        iteration: int | None = None,
        xaxis: str | None = None,
        yaxis: str | None = None,
        zaxis: str | None = None,
        xlabels: Sequence[str] | None = None,
        ylabels: Sequence[str] | None = None,
        camera: Sequence[float] | None = None,
        comment: str | None = None,
        extra_layout: Mapping[str, Any] | None = None,
    ) -> None:
        def build() -> Report:
            axes = (xaxis, yaxis, zaxis)
            doc = matrix_figure("surface", matrix, axes, xlabels, ylabels, False, extra_layout)
            return _plot(doc, "surface", comment)

        self._store_report(title, series, iteration, build)

    def report_media(
        self,
        title: str,
        series: str,
        iteration: int | None = None,
        local_path: str | Path | None = None,
        stream: Any = None,
        file_extension: str | None = None,
        max_history: int | None = None,
        delete_after_upload: bool = False,
        url: str | None = None,
    ) -> None:
        """A file (audio, video, HTML, anything: an image is an image report), a stream or a URL."""
        self._store_report(
            title, series, iteration, lambda: of_media(local_path, stream, file_extension, url)
        )


def _plot(doc: dict[str, Any], source: str, comment: str | None) -> Report:
    return json_report("plotly", doc, {"source": source, **({"comment": comment} if comment else {})})
