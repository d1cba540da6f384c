"""ClearML's debug samples and plots (``report_image``, ``report_histogram``, ``report_table``,
``report_matplotlib_figure``, ``report_plotly``) as files of the experiment.

Why artifacts: each report is one small file (a PNG, or a JSON document) that must reach the store
exactly once, from any rank, through the same spool and ingest as ``upload_artifact``. So a report
is an ARTIFACT event of kind ``report`` whose metadata says what it is: ``report`` (image,
histogram, table, plotly), ``title``, ``series``, ``step`` and ``rank``. Its name,
``report/KIND/TITLE/SERIES/STEP[@rankN]``, makes the same (title, series, step) reported again by
the same process replace the earlier one, and two ranks keep one each.

Standard library only: a numpy array becomes a PNG through its own methods and ``zlib`` (no
numpy import, no Pillow); a PIL image, a matplotlib figure or a pandas DataFrame writes itself.
"""

from __future__ import annotations

import csv
import hashlib
import json
import mimetypes
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.errors import UsageError
from phalanx.tracking.objects import ArtifactError

if TYPE_CHECKING:
    from phalanx.tracking.task import Task

KINDS = ("image", "histogram", "table", "plotly", "media")
MAX_TABLE_CELLS = 100_000  # a table bigger than this is a dataset: upload_artifact stores it
MAX_HISTOGRAM_BINS = 10_000
_IMAGE_MAGIC = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF8": "image/gif"}


@dataclass(frozen=True)
class Report:
    """One report, ready for the spool: its bytes, their type and file extension."""

    kind: str
    payload: bytes
    content_type: str
    extension: str
    extra: Mapping[str, Any]  # metadata beyond title/series/step/rank (a table's shape...)


def artifact_name(kind: str, title: str, series: str, step: int, rank: int | None) -> str:
    own = "" if rank is None else f"@rank{rank}"
    return f"report/{kind}/{title}/{series}/{step}{own}"


def file_name(kind: str, title: str, series: str, step: int, rank: int | None, extension: str) -> str:
    """A safe file name for any title (which may hold '/', spaces, anything): a digest of the key."""
    digest = hashlib.sha1(json.dumps([kind, title, series, step, rank]).encode()).hexdigest()[:20]
    return f"{kind}-{step}-{digest}.{extension}"


def check_labels(title: Any, series: Any) -> None:
    for what, value in (("title", title), ("series", series)):
        if not isinstance(value, str) or not value.strip():
            raise ArtifactError(f"a report's {what} must be a non-empty string, not {value!r}")
        if any(ord(c) < 32 for c in value):
            raise ArtifactError(f"a report's {what} {value!r} cannot contain control characters")


# --- images -----------------------------------------------------------------------------------


def of_image(local_path: Any = None, image: Any = None) -> Report:
    """``local_path`` (an image file) or ``image``: PNG/JPEG/GIF bytes, a PIL image, or a numpy
    array (H x W gray, H x W x 3 RGB, H x W x 4 RGBA; floats are read as 0..1)."""
    if (local_path is None) == (image is None):
        raise ArtifactError("report_image: give one of local_path= (an image file) or image=")
    if local_path is not None:
        path = Path(local_path).expanduser()
        if not path.is_file():
            raise ArtifactError(f"report_image: {str(local_path)!r} is not a file")
        data = path.read_bytes()
        kind = _magic(data) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if not kind.startswith("image/"):
            raise ArtifactError(f"report_image: {str(local_path)!r} is not an image (PNG, JPEG or GIF)")
        return Report("image", data, kind, path.suffix.lstrip(".").lower() or "img", {})
    module = type(image).__module__.split(".")[0]
    if isinstance(image, bytes | bytearray | memoryview):
        data = bytes(image)
        found = _magic(data)
        if found is None:
            raise ArtifactError("report_image: these bytes are not a PNG, JPEG or GIF image")
        return Report("image", data, found, found.split("/")[1], {})
    if module == "PIL" and hasattr(image, "save"):
        buf = BytesIO()
        image.save(buf, format="PNG")
        return Report("image", buf.getvalue(), "image/png", "png", {})
    if module == "numpy" and hasattr(image, "shape"):
        return Report("image", png_of_array(image), "image/png", "png", {})
    raise ArtifactError(
        f"report_image: cannot read a {module}.{type(image).__name__} as an image; pass PNG/JPEG bytes, "
        "a PIL image, a numpy array or local_path="
    )


def of_figure(figure: Any) -> Report:
    """A matplotlib Figure (or the pyplot module: its current figure) as a PNG."""
    if hasattr(figure, "gcf"):
        figure = figure.gcf()
    if not hasattr(figure, "savefig"):
        raise ArtifactError(f"report_matplotlib_figure: a {type(figure).__name__} is not a matplotlib figure")
    buf = BytesIO()
    figure.savefig(buf, format="png")
    return Report("image", buf.getvalue(), "image/png", "png", {"source": "matplotlib"})


def png_of_array(array: Any) -> bytes:
    """An 8-bit PNG of a numpy array, written with zlib (the array's own methods do the numbers)."""
    shape = tuple(int(n) for n in array.shape)
    if len(shape) == 3 and shape[2] == 1:
        shape = shape[:2]
        array = array.reshape(shape)
    colour = 0 if len(shape) == 2 else ({3: 2, 4: 6}.get(shape[2]) if len(shape) == 3 else None)
    if colour is None or 0 in shape:
        raise ArtifactError(
            f"report_image: an array of shape {tuple(array.shape)} is not an image; use H x W (gray), "
            "H x W x 3 (RGB) or H x W x 4 (RGBA)"
        )
    if array.dtype.kind == "f":
        array = (array.clip(0.0, 1.0) * 255.0).round()
    elif array.dtype.kind == "b":
        array = array * 255
    pixels = array.clip(0, 255).astype("uint8", order="C").tobytes()
    height, width = shape[0], shape[1]
    row = len(pixels) // height
    raw = b"".join(b"\x00" + pixels[i * row : (i + 1) * row] for i in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw))
        + _chunk(b"IEND", b"")
    )


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def _magic(data: bytes) -> str | None:
    return next((kind for magic, kind in _IMAGE_MAGIC.items() if data.startswith(magic)), None)


# --- histograms, tables, plotly ---------------------------------------------------------------


def of_histogram(
    values: Any,
    labels: Sequence[str] | None = None,
    xlabels: Sequence[str] | None = None,
    xaxis: str | None = None,
    yaxis: str | None = None,
) -> Report:
    """ClearML's ``values``: one bar per value (a list, or a numpy array of 1 or 2 dimensions: a
    row per bar, a column per ``labels`` series)."""
    rows = values.tolist() if hasattr(values, "tolist") else list(values)
    if not rows:
        raise ArtifactError("report_histogram: values is empty")
    if len(rows) > MAX_HISTOGRAM_BINS:
        raise ArtifactError(f"report_histogram: {len(rows)} bins; at most {MAX_HISTOGRAM_BINS}")
    matrix = [[_number(v) for v in (r if isinstance(r, list | tuple) else [r])] for r in rows]
    width = len(matrix[0])
    if any(len(r) != width for r in matrix):
        raise ArtifactError("report_histogram: every row of values needs the same number of columns")
    doc = {
        "values": matrix,
        "labels": [str(x) for x in labels] if labels is not None else None,
        "xlabels": [str(x) for x in xlabels] if xlabels is not None else None,
        "xaxis": xaxis,
        "yaxis": yaxis,
    }
    return json_report("histogram", doc, {"bins": len(matrix)})


def of_table(table_plot: Any = None, csv_path: Any = None) -> Report:
    """A pandas DataFrame, a list of rows (the first the header), or a CSV file, as
    ``{"columns": [...], "rows": [[...]]}``."""
    if (table_plot is None) == (csv_path is None):
        raise ArtifactError("report_table: give one of table_plot= (a DataFrame or rows) or csv=")
    if csv_path is not None:
        path = Path(csv_path).expanduser()
        if not path.is_file():
            raise ArtifactError(f"report_table: {str(csv_path)!r} is not a file")
        with path.open(newline="", encoding="utf-8") as fh:
            found = list(csv.reader(fh))
        columns, rows = (found[0], found[1:]) if found else ([], [])
    elif hasattr(table_plot, "columns") and hasattr(table_plot, "to_dict"):  # pandas
        frame = table_plot.reset_index() if _named_index(table_plot) else table_plot
        columns = [str(c) for c in frame.columns]
        rows = [list(r) for r in frame.itertuples(index=False, name=None)]
    elif isinstance(table_plot, list | tuple) and table_plot:
        columns, rows = [str(c) for c in table_plot[0]], [list(r) for r in table_plot[1:]]
    else:
        raise ArtifactError(
            f"report_table: cannot read a {type(table_plot).__name__} as a table; pass a pandas DataFrame "
            "or a list of rows whose first row names the columns"
        )
    if len(rows) * max(len(columns), 1) > MAX_TABLE_CELLS:
        raise ArtifactError(
            f"report_table: more than {MAX_TABLE_CELLS} cells; store a dataset with upload_artifact"
        )
    doc = {"columns": columns, "rows": [[_cell(v) for v in r] for r in rows]}
    return json_report("table", doc, {"rows": len(rows), "columns": len(columns)})


def of_plotly(figure: Any) -> Report:
    """A plotly Figure (its ``to_plotly_json()``) or a dict with ``data``/``layout``, as JSON."""
    if hasattr(figure, "to_json"):
        doc = json.loads(figure.to_json())
    elif hasattr(figure, "to_plotly_json"):
        doc = figure.to_plotly_json()
    elif isinstance(figure, Mapping):
        doc = dict(figure)
    else:
        raise ArtifactError(f"report_plotly: a {type(figure).__name__} is not a plotly figure or dict")
    return json_report("plotly", doc, {})


def json_report(kind: str, doc: Any, extra: Mapping[str, Any]) -> Report:
    """A report whose file is ``doc`` as JSON (no NaN or infinity: strict JSON readers refuse them)."""
    try:
        payload = json.dumps(doc, default=_plain, allow_nan=False).encode()
    except ValueError as exc:
        raise ArtifactError(f"report_{kind}: {exc} (NaN or infinity cannot be stored)") from None
    return Report(kind, payload, "application/json", "json", extra)


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ArtifactError(f"report_histogram: {value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ArtifactError("report_histogram: values must be finite numbers (no NaN, no infinity)")
    return number


def _cell(value: Any) -> Any:
    if hasattr(value, "item"):  # a numpy scalar
        value = value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None if value != value else str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _named_index(frame: Any) -> bool:
    return any(name is not None for name in getattr(frame.index, "names", [None]))


# --- the Logger's methods ---------------------------------------------------------------------


class DebugSamples:
    """``report_image``, ``report_histogram``, ``report_table``, ``report_matplotlib_figure`` and
    ``report_plotly`` of ``Logger`` (seed 003's ClearML calls). Each writes its file into the spool
    now (the object may change after the call) and queues the event naming it; ``iteration``
    None is the next step of that (title, series). A value that cannot be stored raises UsageError
    saying why."""

    _task: Task
    _report_steps: dict[tuple[str, str, str], int]

    def report_image(
        self,
        title: str,
        series: str,
        iteration: int | None = None,
        local_path: str | Path | None = None,
        image: Any = None,
        **_clearml_only: Any,
    ) -> None:
        self._store_report(title, series, iteration, lambda: of_image(local_path, image))

    def report_matplotlib_figure(
        self, title: str, series: str, figure: Any, iteration: int | None = None, **_clearml_only: Any
    ) -> None:
        self._store_report(title, series, iteration, lambda: of_figure(figure))

    def report_histogram(
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
        build = lambda: of_histogram(values, labels, xlabels, xaxis, yaxis)  # noqa: E731
        self._store_report(title, series, iteration, build)

    def report_table(
        self,
        title: str,
        series: str,
        iteration: int | None = None,
        table_plot: Any = None,
        csv: str | Path | None = None,
        **_clearml_only: Any,
    ) -> None:
        self._store_report(title, series, iteration, lambda: of_table(table_plot, csv))

    def report_plotly(
        self, title: str, series: str, figure: Any, iteration: int | None = None, **_clearml_only: Any
    ) -> None:
        self._store_report(title, series, iteration, lambda: of_plotly(figure))

    def _store_report(self, title: str, series: str, iteration: int | None, build: Any) -> None:
        try:
            check_labels(title, series)
            report: Report = build()
        except ArtifactError as exc:
            raise UsageError(str(exc)) from None
        key = (report.kind, title, series)
        step = self._report_steps.get(key, -1) + 1 if iteration is None else int(iteration)
        self._report_steps[key] = max(step, self._report_steps.get(key, -1))
        reporter = self._task._reporter
        rank = reporter.rank()
        filename = file_name(report.kind, title, series, step, rank, report.extension)
        rel, target = reporter.file_slot(filename)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(report.payload)
        meta = {"report": report.kind, "title": title, "series": series, "step": step, "rank": rank}
        reporter.event(
            "artifact",
            {
                "name": artifact_name(report.kind, title, series, step, rank),
                "kind": "report",
                "path": f"reports/{reporter.writer.stream}/{filename}",
                "size": len(report.payload),
                "content_type": report.content_type,
                "metadata": {**meta, **report.extra},
                "spool_path": rel,
            },
        )
