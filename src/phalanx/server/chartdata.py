"""The compact chart format: what a chart needs, in a fraction of the bytes of the JSON floats.

``GET .../metrics/{title}?format=compact`` answers the same series as the default JSON form, encoded
per series as

- ``step0`` and ``dsteps``: the first step, then each step minus the one before (small integers);
- ``time0`` and ``dtimes_ms``: the first wall time (exact), then each time minus the one before in
  whole milliseconds (the offsets are rounded from ``time0``, so decoding does not drift);
- ``values``: each value rounded to what a chart can show, and no finer than that: 6 significant
  digits of the value itself, or a millionth of the series' range when that is finer (a loss that
  moves in its 7th digit keeps its shape; a log-scaled value keeps its digits), null where the
  value was NaN or infinite;
- ``count`` and ``downsampled`` as in the JSON form.

Decoding is a running sum (``phalanx/server/ui/js/api.js`` does it; ``decode`` below is the same in
Python). Sent gzip-compressed when the client accepts it. The default form stays the API's: the SDK,
the CLI and exports read full-precision floats.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

# Responses smaller than this go uncompressed (gzip's header and the CPU are not worth it).
GZIP_MIN_BYTES = 1024
GZIP_LEVEL = 1  # zlib's fastest: 20 % more bytes than level 5 on noisy values, a third of the CPU


def encode_series(
    steps: Sequence[int],
    values: Sequence[float | None],
    times: Sequence[float],
    count: int,
    downsampled: bool,
) -> dict[str, Any]:
    """One series in the compact form (see the module's docstring)."""
    out: dict[str, Any] = {"count": count, "downsampled": downsampled}
    out["step0"] = steps[0] if steps else 0
    out["dsteps"] = [b - a for a, b in itertools.pairwise(steps)]
    if times:
        t0 = times[0]
        offsets = [round((t - t0) * 1000.0) for t in times]
        out["time0"] = t0
        out["dtimes_ms"] = [b - a for a, b in itertools.pairwise(offsets)]
    else:
        out["time0"] = None
        out["dtimes_ms"] = []
    out["values"] = chart_values(values)
    return out


def chart_values(values: Sequence[float | None]) -> list[float | None]:
    """Values rounded to 6 significant digits, or to a millionth of the series' range where that is
    finer; non-finite values become None."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return [None] * len(values)
    spread = max(finite) - min(finite)
    # decimals that resolve a millionth of the range (none needed for a flat series)
    range_decimals = 6 - math.floor(math.log10(spread)) if spread > 0 else -308
    # at or above this magnitude a value's own 6 digits are coarser: the range's decimals apply
    # (decided without a logarithm per value, which was most of the cost)
    large = 10.0 ** (5 - range_decimals) if spread > 0 else math.inf
    out: list[float | None] = []
    append = out.append
    log10, floor, isfinite = math.log10, math.floor, math.isfinite
    for v in values:
        if v is None or not isfinite(v):
            append(None)
        elif v >= large or -v >= large:
            append(round(v, range_decimals))
        elif v == 0.0:
            append(0.0)
        else:
            own = 5 - floor(log10(abs(v)))  # 6 significant digits
            decimals = own if own > range_decimals else range_decimals
            append(round(v, decimals) if decimals < 17 else v)
    return out


def render(title: str, x: str, series: Mapping[str, dict[str, Any]]) -> bytes:
    """The whole compact answer as JSON bytes (no whitespace)."""
    body = {"title": title, "x": x, "format": "compact", "series": series}
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


def compress(body: bytes, accept_encoding: str) -> tuple[bytes, dict[str, str]]:
    """``body`` gzip-compressed when the client accepts gzip and it is worth it, with its headers."""
    headers = {"Vary": "Accept-Encoding"}
    if len(body) >= GZIP_MIN_BYTES and "gzip" in accept_encoding.lower():
        headers["Content-Encoding"] = "gzip"
        return gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0), headers
    return body, headers


def decode(compact: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A compact answer's series back in the JSON form's shape (steps, values, times, count,
    downsampled), exactly as the UI decodes them."""
    out: dict[str, dict[str, Any]] = {}
    for name, s in compact["series"].items():
        steps = [s["step0"]] if s["values"] else []
        for d in s["dsteps"]:
            steps.append(steps[-1] + d)
        times: list[float] = []
        if s["time0"] is not None and s["values"]:
            acc = 0
            times.append(s["time0"])
            for d in s["dtimes_ms"]:
                acc += d
                times.append(s["time0"] + acc / 1000)
        out[name] = {
            "steps": steps,
            "values": s["values"],
            "times": times,
            "count": s["count"],
            "downsampled": s["downsampled"],
        }
    return out
