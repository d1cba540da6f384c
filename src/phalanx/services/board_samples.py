"""A board's images and histograms: what ``Logger.report_image`` (and
``report_matplotlib_figure``) and ``Logger.report_histogram`` recorded, as TensorBoard summaries
that its Images and Histograms tabs read (docs/services.md).

An image is TensorBoard's image summary: the recorded PNG, JPEG or GIF bytes as they are, with their
size read from the file's header. A histogram report is ClearML's: one bar per value (a row per
bar, a column per label), so each column becomes a TensorBoard histogram whose bucket ``i`` spans
``[i, i + 1)`` and counts that bar's value (TensorBoard's x axis is then the bar's index; a
negative bar, which no histogram can count, is drawn as 0).
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
from tensorboard.compat.proto import summary_pb2  # the `tensorboard` extra
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.image import metadata as image_metadata
from tensorboard.util import tensor_util

SHOWN = ("image", "histogram")  # the reports a board renders (tables and plots have no TensorBoard tab)


def sample_values(report: str, tag: str, payload: bytes) -> list[summary_pb2.Summary.Value]:
    """The summary values of one recorded report of kind ``report`` (an image's or a histogram's
    file), under ``tag``; [] for a file that is not what its kind says."""
    if report == "image":
        return [_image(tag, payload)]
    try:
        doc = json.loads(payload)
    except ValueError:
        return []
    return _histograms(tag, doc) if isinstance(doc, dict) else []


def _image(tag: str, payload: bytes) -> summary_pb2.Summary.Value:
    width, height = image_size(payload)
    tensor = tensor_util.make_tensor_proto(
        np.array([str(width).encode(), str(height).encode(), payload], dtype=object)
    )
    meta = image_metadata.create_summary_metadata(display_name=tag, description="")
    return summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)


def _histograms(tag: str, doc: dict[str, Any]) -> list[summary_pb2.Summary.Value]:
    rows = doc.get("values")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) and r for r in rows):
        return []
    width = len(rows[0])
    labels = doc.get("labels") or []
    found = []
    for column in range(width):
        counts = [max(float(r[column]), 0.0) if column < len(r) else 0.0 for r in rows]
        edges = np.arange(len(counts), dtype=np.float64)
        buckets = np.stack([edges, edges + 1.0, np.array(counts, dtype=np.float64)], axis=1)
        named = tag if width == 1 else f"{tag}/{labels[column] if column < len(labels) else column}"
        meta = histogram_metadata.create_summary_metadata(display_name=named, description="")
        found.append(
            summary_pb2.Summary.Value(tag=named, metadata=meta, tensor=tensor_util.make_tensor_proto(buckets))
        )
    return found


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's, GIF's or JPEG's header; (0, 0) when it says none."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    return 0, 0


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """A JPEG's size, from its first start-of-frame segment (SOF0-SOF15 but DHT, JPG and DAC)."""
    at = 2
    while at + 9 < len(data):
        if data[at] != 0xFF:
            return 0, 0
        marker = data[at + 1]
        length = struct.unpack(">H", data[at + 2 : at + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return int(width), int(height)
        at += 2 + length
    return 0, 0
