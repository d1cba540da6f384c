"""The spool format: complete JSON lines, (stream, seq) numbering, scalar columns."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from phalanx.spool import (
    SpoolWriter,
    decode_points,
    encode,
    encode_points,
    read_records,
    spool_files,
    unshipped,
    write_shipped,
)


def test_points_round_trip_through_columns() -> None:
    points = [("loss", "w0", 0, 0.5, 1.0), ("acc", "w0", 0, math.inf, 2.0), ("loss", "w0", 1, -1e300, 3.5)]
    keys, idx, steps, values, times = decode_points(encode_points(points))
    assert [(*keys[i], s, v, t) for i, s, v, t in zip(idx or [], steps, values, times, strict=True)] == points
    one = encode_points([("loss", "w0", i, i, i) for i in range(3)])
    assert "k" not in one and decode_points(one)[1] is None


def test_malformed_columns_are_refused() -> None:
    data = encode_points([("loss", "w0", i, i, i) for i in range(3)])
    with pytest.raises(ValueError):
        decode_points({**data, "n": 4})
    with pytest.raises(ValueError):
        decode_points({**data, "keys": []})


def test_a_scalar_record_line_is_the_json_of_the_record() -> None:
    """Columns spliced into the line as they are (no JSON scan) still make the same JSON object,
    names that need escapes (quotes, backslashes, non-ASCII) included."""
    data = encode_points([("loss", 'w "0" \\ é', 0, 0.5, 1.0), ("acc", "x\n", 1, math.nan, 2.0)])
    record = {"kind": "scalar", "experiment_id": "e", "rank": None, "time": 1.0, "data": data, "seq": 3}
    line = encode(record)
    assert line.endswith(b"}\n") and line.count(b"\n") == 1
    assert json.loads(line) == json.loads(json.dumps(record))
    assert json.loads(encode({"data": {"step": data["step"]}})) == {"data": {"step": data["step"]}}


# A line the writer of the previous release wrote (json.dumps of the whole record, data in the
# middle): a spool left by a killed run of it is ingested after an upgrade.
PREVIOUS_LINE = (
    b'{"kind":"scalar","experiment_id":"EXP","replica":"worker-0","role":"worker","index":0,"rank":1,'
    b'"time":1.0,"data":{"keys":[["loss","w \\"0\\" \xc3\xa9"],["acc","x"]],"n":3,'
    b'"step":"AAAAAAAAAAABAAAAAAAAAAEAAAAAAAAA","value":"AAAAAAAA4D8AAAAAAAD4fwAAAAAAANA/",'
    b'"time":"AAAAAAAA8D8AAAAAAAAAQAAAAAAAAABA","k":"AAAAAAAAAAABAAAA"},"attempt":0,"stream":"STREAM",'
    b'"seq":0}\n'
)


def test_a_line_of_the_previous_writer_reads_as_the_points_it_held(tmp_path: Path) -> None:
    spool = tmp_path / "STREAM.spool"
    spool.write_bytes(PREVIOUS_LINE)
    (record,), end = read_records(spool, 0)
    assert end == len(PREVIOUS_LINE) and (record["stream"], record["seq"]) == ("STREAM", 0)
    keys, idx, steps, values, times = decode_points(record["data"])
    points = [(*keys[i], s, v, t) for i, s, v, t in zip(idx or [], steps, values, times, strict=True)]
    assert points[0] == ("loss", 'w "0" é', 0, 0.5, 1.0) and points[2] == ("acc", "x", 1, 0.25, 2.0)
    assert math.isnan(points[1][3])
    rewritten = encode({k: v for k, v in record.items() if k != "data"} | {"data": encode_points(points)})
    assert json.loads(rewritten) == record  # what this writer writes is the same record


def test_a_reopened_stream_continues_its_numbering(tmp_path: Path) -> None:
    with SpoolWriter(tmp_path, experiment_id="e", stream="console-e") as w:
        assert [w.write("log", {"text": "a"}), w.write("log", {"text": "b"})] == [0, 1]
    with SpoolWriter(tmp_path, experiment_id="e", stream="console-e") as w:
        assert w.log("c\nd\n", replica="worker-1", stream="stderr") == 2
    records, end = read_records(tmp_path / "console-e.spool", 0)
    assert [r["seq"] for r in records] == [0, 1, 2]
    assert records[2]["data"] == {"stream": "stderr", "lines": ["c", "d"]}
    assert records[2]["replica"] == "worker-1"
    assert end == (tmp_path / "console-e.spool").stat().st_size


def test_reading_stops_before_a_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "s.spool"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c":')
    records, end = read_records(path, 0)
    assert records == [{"a": 1}, {"b": 2}] and end == 18
    assert read_records(path, end) == ([], end)


def test_a_stream_a_shipper_claimed_for_a_server_is_left_by_every_reader_but_its_supervisor(
    tmp_path: Path,
) -> None:
    """A script reporting to a server spools in this machine's home too: `phalanx ls` must not take
    it into this machine's store; the supervisor of its own experiment still takes everything."""
    folder = tmp_path / "spool" / "e1"
    folder.mkdir(parents=True)
    local, shipped = folder / "host-1-aa.spool", folder / "host-2-bb.spool"
    local.write_bytes(b"{}\n")
    shipped.write_bytes(b"{}\n")
    write_shipped(folder, "host-2-bb", 0, -1)  # what a Shipper writes when it starts
    assert spool_files(tmp_path / "spool") == [local]
    assert spool_files(folder, claimed=True) == [local, shipped]
    assert unshipped(shipped) and not unshipped(local)  # gc keeps it until the server has it all
    write_shipped(folder, "host-2-bb", shipped.stat().st_size, 0)
    assert not unshipped(shipped)


@pytest.mark.parametrize("step", [2**63, -(2**63) - 1, 1.5, "1"])
def test_a_step_the_column_cannot_hold_is_a_type_error(step: object) -> None:
    """What the reporting thread catches to screen the record point by point (tracking.client)."""
    with pytest.raises(TypeError):
        encode_points([("loss", "w0", 0, 0.5, 1.0), ("loss", "w0", step, 0.5, 1.0)])
