"""The spool: one append-only file of JSON lines per writing process (standard library only, and no
other Phalanx module: the SDK writes it, ingest and the store read it, the system-metrics sampler of
``phalanx.machine`` writes it too, so it sits below all of them and ships with the SDK copy).

Every record is one event: ``{"stream", "seq", "kind", "experiment_id", "replica", "role", "index",
"rank", "time", "data"}``, and ``"attempt"`` when the writer knows it (store.sql.attempts).
``stream`` names the file (``<stream>.spool``) and ``seq`` counts the stream's records from 0, so
(stream, seq) identifies a record everywhere: ingest stores it exactly once, and the server accepts
the same records over HTTP. A record is complete once its newline is written; a reader ignores a
trailing partial line (a writer killed mid-write).

After ingest commits a stream's records it writes ``<stream>.ack`` holding the last committed seq;
``SpoolWriter.wait_for_ack`` is how ``task.flush()`` knows its points are visible in the store.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import struct
import sys
import threading
import time
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

SUFFIX = ".spool"
ACK_SUFFIX = ".ack"
REFUSED_SUFFIX = ".refused"  # JSON lines {"seq", "why"}: records (or parts) ingest could not store
# "OFFSET SEQ" the server has answered for: a stream with one is a server's (its writer reports over
# HTTP, tracking.shipper), never ingested into this machine's store
SHIPPED_SUFFIX = ".shipped"


def shipped_path(spool_dir: Path, stream: str) -> Path:
    return spool_dir / f"{stream}{SHIPPED_SUFFIX}"


def read_shipped(spool_dir: Path, stream: str) -> tuple[int, int]:
    """(byte offset, last seq) the server has answered for; (0, -1) when nothing was shipped."""
    try:
        offset, seq = shipped_path(spool_dir, stream).read_text().split()
        return int(offset), int(seq)
    except (OSError, ValueError):
        return 0, -1


def write_shipped(spool_dir: Path, stream: str, offset: int, seq: int) -> None:
    target = shipped_path(spool_dir, stream)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(f"{offset} {seq}\n")
    os.replace(tmp, target)


def unshipped(path: Path) -> bool:
    """Whether the spool file ``path`` is a server's stream holding records its server has not
    answered for (``phalanx sync`` ships them: nothing may remove them before)."""
    stream = path.name[: -len(SUFFIX)]
    return (
        shipped_path(path.parent, stream).exists()
        and read_shipped(path.parent, stream)[0] < path.stat().st_size
    )


def spool_files(folder: Path, claimed: bool = False) -> list[Path]:
    """The spool files under ``folder`` (``<home>/spool`` or one experiment's folder of it) that
    this machine's store takes: a stream a shipper claimed for a server (``SHIPPED_SUFFIX``: a
    script reporting to a server) is left to it, or to `phalanx sync`, unless ``claimed``."""
    found = [*folder.glob(f"*{SUFFIX}"), *folder.glob(f"*/*{SUFFIX}")]
    if claimed:
        return sorted(found)
    return sorted(p for p in found if not p.with_name(p.name[: -len(SUFFIX)] + SHIPPED_SUFFIX).exists())


def host_tag() -> str:
    # uname's node name is what socket.gethostname() answers; neither socket nor secrets is imported
    # (12 ms of every replica's and every `phalanx ls`'s start, issue 42)
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in os.uname().nodename)[:32] or "host"


def new_stream_id() -> str:
    """``<host>-<pid>-<random>``: unique per writing process, even across hosts and pid reuse."""
    return f"{host_tag()}-{os.getpid()}-{os.urandom(4).hex()}"


def stream_writer(stream: str) -> int | None:
    """The pid of the process of this host that writes ``stream`` (named by ``new_stream_id``), or
    None for another host's stream or one named otherwise. Whether it still runs is
    ``phalanx.machine.procs.writer_gone``'s question (the one liveness check)."""
    parts = stream.rsplit("-", 2)
    if len(parts) != 3 or parts[0] != host_tag() or not parts[1].isdigit():
        return None
    return int(parts[1])


_FIELDS = tuple(map(itemgetter, range(5)))  # a point's title, series, step, value and time


def encode_points(points: Sequence[tuple[Any, ...]]) -> dict[str, Any]:
    """``encode_columns`` of points given as (title, series, step, value, time, ...) tuples (a sixth
    field, the rank, belongs to the record, not the points)."""
    return encode_columns(*(list(map(field, points)) for field in _FIELDS))


def encode_columns(
    titles: Sequence[Any],
    series: Sequence[Any],
    steps: Sequence[Any],
    values: Sequence[Any],
    times: Sequence[Any],
) -> dict[str, Any]:
    """A SCALAR event's data for many points given as columns: ``keys`` lists the
    distinct [title, series] pairs, ``k`` each point's index into it (omitted when there is one
    key), and ``step`` / ``value`` / ``time`` are little-endian int64 / float64 arrays in base64.
    Decoding these is a memcpy, where parsing the same points as JSON lists costs microseconds each.
    TypeError for what a column cannot hold (a step beyond 64 bits or not an integer, a name that
    cannot be a key)."""
    # each column packed by one struct call and the distinct keys found by C loops: this runs on
    # the training process's reporting thread, so no Python statement per point
    if len(set(titles)) == 1 == len(set(series)):  # one series: no pair per point
        keys = {(titles[0], series[0]): 0}
    else:
        keys = {k: i for i, k in enumerate(dict.fromkeys(zip(titles, series, strict=True)))}
    n = len(steps)
    data: dict[str, Any] = {
        "keys": [list(k) for k in keys],
        "n": n,
        "step": _packed("q", n, steps),
        "value": _packed("d", n, values),
        "time": _packed("d", n, times),
    }
    if len(keys) > 1:
        data["k"] = _packed("I", n, map(keys.__getitem__, zip(titles, series, strict=True)))
    return data


def decode_points(
    data: Mapping[str, Any],
) -> tuple[list[tuple[str, str]], Sequence[int] | None, Sequence[int], Sequence[float], Sequence[float]]:
    """The columns of ``encode_points``: (keys, key index per point or None, steps, values, times).
    ValueError when they are malformed."""
    n = int(data["n"])
    keys = [(str(t), str(s)) for t, s in data["keys"]]
    steps = _unb64("q", data["step"], n)
    values = _unb64("d", data["value"], n)
    times = _unb64("d", data["time"], n)
    idx = _unb64("I", data["k"], n) if "k" in data else None
    if not keys or (idx is None and len(keys) != 1) or (idx is not None and idx and max(idx) >= len(keys)):
        raise ValueError("scalar columns: 'k' does not match 'keys'")
    return keys, idx, steps, values, times


class Base64(str):
    """Base64 text of a scalar column (``encode_points``): nothing in it needs a JSON escape, so
    ``encode`` copies it into the line instead of having ``json.dumps`` scan it (most of a scalar
    record's bytes: that scan cost the reporting thread about 0.08 µs a point)."""

    __slots__ = ()


def _packed(code: str, n: int, column: Iterable[Any]) -> Base64:
    """``n`` values as little-endian ``code`` (struct's) in base64: packing a tuple is a third of
    what an ``array`` built from an iterator costs (issue 42). TypeError for what the column cannot
    hold (a step beyond 64 bits, a step that is not an integer)."""
    try:
        packed = struct.pack(f"<{n}{code}", *column)
    except struct.error as exc:
        raise TypeError(f"scalar columns: {exc}") from None
    return Base64(binascii.b2a_base64(packed, newline=False).decode("ascii"))


def _unb64(code: str, text: str, n: int) -> array[Any]:
    values = array(code)
    values.frombytes(base64.b64decode(text))
    if sys.byteorder == "big":
        values.byteswap()
    if len(values) != n:
        raise ValueError(f"scalar columns: expected {n} values, got {len(values)}")
    return values  # iterated straight into the database: no list of a million floats in between


def check_columns(data: Mapping[str, Any]) -> None:
    """Cheap shape check of ``encode_points`` data without decoding it (ValueError if wrong)."""
    n = data["n"]
    if not isinstance(n, int) or n < 0:
        raise ValueError("scalar columns: 'n' must be a count")
    keys = data["keys"]
    if not isinstance(keys, list) or not keys or not all(isinstance(k, list) and len(k) == 2 for k in keys):
        raise ValueError("scalar columns: 'keys' must list [title, series] pairs")
    sizes = {"step": 8, "value": 8, "time": 8, "k": 4}
    for column, width in sizes.items():
        if column == "k" and column not in data:
            if len(keys) != 1:
                raise ValueError("scalar columns: 'k' is needed with several keys")
            continue
        text = data[column]
        if not isinstance(text, str) or len(text) != 4 * ((n * width + 2) // 3):
            raise ValueError(f"scalar columns: {column!r} does not hold {n} values")


def encode(record: Mapping[str, Any]) -> bytes:
    """A record as its spool line. The ``Base64`` columns of its data are spliced in as they are,
    after the data's other fields, and the data after the record's other fields: the same JSON
    object as ``json.dumps`` of the record gives (a reader never depends on the order of fields)."""
    data = record.get("data")
    columns = [(k, v) for k, v in data.items() if type(v) is Base64] if isinstance(data, dict) else []
    if not columns or not isinstance(data, dict):
        return (_dumps(record) + "\n").encode()
    head = _dumps({k: v for k, v in record.items() if k != "data"})[:-1]
    rest = _dumps({k: v for k, v in data.items() if type(v) is not Base64})[:-1]
    parts = [head, "," if head != "{" else "", '"data":', rest]
    for key, text in columns:
        parts += ["," if parts[-1] != "{" else "", _dumps(str(key)), ':"', text, '"']
    parts.append("}}\n")
    return "".join(parts).encode()


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


class SpoolWriter:
    """Appends records to ``<spool_dir>/<stream>.spool``; thread-safe, synchronous, no buffering.

    ``experiment_id`` / ``replica`` / ``role`` / ``index`` / ``rank`` are defaults every record
    carries; ``write`` may override them per record (the supervisor writes console lines of several
    replicas through one writer). ``sync()`` makes what was written durable (fsync). Not fork-safe:
    a forked child must open its own writer (its own stream)."""

    def __init__(
        self,
        spool_dir: str | os.PathLike[str],
        *,
        experiment_id: str,
        replica: str = "master",
        role: str = "master",
        index: int = 0,
        rank: int | None = None,
        stream: str | None = None,
        attempt: int | None = None,
    ) -> None:
        self.spool_dir = Path(spool_dir)
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.stream = stream or new_stream_id()
        self.path = self.spool_dir / f"{self.stream}{SUFFIX}"
        self.experiment_id = experiment_id
        self.replica, self.role, self.index, self.rank = replica, role, index, rank
        self.attempt = attempt  # PHALANX_ATTEMPT: a later attempt's steps replace an earlier one's
        self._lock = threading.RLock()  # re-entered by a signal handler flushing mid-write
        self._seq = _records_in(self.path)  # resume a stream's numbering if the file exists
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @property
    def last_seq(self) -> int:
        """The seq of the last record written (-1 before the first)."""
        return self._seq - 1

    def record(
        self,
        kind: str,
        data: Mapping[str, Any],
        *,
        time_: float | None = None,
        replica: str | None = None,
        role: str | None = None,
        index: int | None = None,
        rank: int | None = None,
        experiment_id: str | None = None,
    ) -> dict[str, Any]:
        """A record (without stream/seq, which ``append`` assigns) carrying this writer's defaults."""
        rec = {
            "kind": kind,
            "experiment_id": experiment_id or self.experiment_id,
            "replica": self.replica if replica is None else replica,
            "role": self.role if role is None else role,
            "index": self.index if index is None else index,
            "rank": self.rank if rank is None else rank,
            "time": time.time() if time_ is None else time_,
            "data": dict(data),
        }
        if self.attempt is not None:
            rec["attempt"] = self.attempt
        return rec

    def write(self, kind: str, data: Mapping[str, Any], **overrides: Any) -> int:
        """Append one event; returns its seq."""
        return self.append([self.record(kind, data, **overrides)])

    def log(self, text: str, *, stream: str = "stdout", replica: str | None = None, **overrides: Any) -> int:
        """Append console output (one or more lines) of ``replica``; returns the seq."""
        lines = text.split("\n")
        if len(lines) > 1 and lines[-1] == "":
            lines.pop()
        return self.write("log", {"stream": stream, "lines": lines}, replica=replica, **overrides)

    def append(self, records: Iterable[dict[str, Any]]) -> int:
        """Number and append records in one write; returns the last seq (or last_seq if none)."""
        with self._lock:
            if self._fd is None:
                raise ValueError(f"spool writer {self.path} is closed")
            chunks = []
            first = self._seq
            for rec in records:
                rec["stream"] = self.stream
                rec["seq"] = self._seq
                self._seq += 1
                chunks.append(encode(rec))
            if chunks:
                size = os.fstat(self._fd).st_size
                try:
                    _write_all(self._fd, b"".join(chunks))
                except OSError:
                    # disk full (or quota): take back the half-written tail so the next write does
                    # not glue a record onto it, and the seqs, so these records can be written again
                    with contextlib.suppress(OSError):
                        os.ftruncate(self._fd, size)
                    self._seq = first
                    raise
            return self._seq - 1

    def sync(self) -> None:
        """Make everything appended so far durable."""
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def acked(self) -> int:
        return read_ack(self.spool_dir, self.stream)

    def wait_for_ack(self, seq: int | None = None, timeout: float = 60.0, alive: Any = None) -> bool:
        """Wait (bounded) until ingest has committed records up to ``seq`` (default: the last one).
        ``alive``: optional callable; waiting stops early when it returns False (no ingester)."""
        target = self.last_seq if seq is None else seq
        return wait_for_ack(self.spool_dir, self.stream, target, timeout, alive)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> SpoolWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _records_in(path: Path) -> int:
    """Complete records already in a spool file (so reopening a stream continues its seq)."""
    if not path.exists():
        return 0
    last = -1
    with open(path, "rb") as fh:
        for line in fh:
            if line.endswith(b"\n"):
                try:
                    last = int(json.loads(line)["seq"])
                except (ValueError, KeyError, TypeError):
                    continue
    return last + 1


def read_records(
    path: str | os.PathLike[str], offset: int, max_bytes: int = 16 << 20
) -> tuple[list[Any], int]:
    """Complete records from byte ``offset``: (records, offset after the last complete line). A line
    that is not valid JSON is skipped (and counted as read) so one bad line cannot stall ingest."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        chunk = fh.read(max_bytes)
    end = chunk.rfind(b"\n")
    if end < 0:
        if len(chunk) == max_bytes:  # one record larger than max_bytes: read it whole
            return read_records(path, offset, max_bytes * 4)
        return [], offset
    records: list[Any] = []
    for line in chunk[: end + 1].splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            records.append(None)  # malformed: the caller logs and skips it
    return records, offset + end + 1


@contextlib.contextmanager
def taking(path: str | os.PathLike[str], patience: float = 0.0) -> Iterator[bool]:
    """Inside, whether this ingester holds spool file ``path`` for one batch: an exclusive flock on
    it, which another ingester holds while it works on a batch of the same file (a supervisor's, its
    helper processes, a read command's). Positions are
    compared-and-set in the store, so two ingesters never store a record twice; the lock spares the
    loser its wasted batch. ``patience``: seconds to wait for it (0: not at all). The kernel lets
    it go when its holder exits. FileNotFoundError once the file is removed. (A shipper sending a
    stream's leftovers to a server holds its whole file, ``tracking.shipper.ship_leftovers``.)"""
    import fcntl  # why: POSIX only, and only ingesters take a spool file

    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + patience
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.002)
            except OSError:  # no flock on this file system (NFS without its lock daemon): unlocked,
                break  # as before locks were taken (helpers are not started there: ``can_lock``)
        yield True
    finally:
        os.close(fd)  # closing lets it go


def can_lock(folder: Path) -> bool:
    """Whether this file system lets an ingester hold a file (``taking``); a folder not made yet is
    the spool's, made on this machine's file system: True."""
    import fcntl  # why: POSIX only, and only ingesters take a spool file

    try:
        fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:  # held by another: it can
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def ack_path(spool_dir: str | os.PathLike[str], stream: str) -> Path:
    return Path(spool_dir) / f"{stream}{ACK_SUFFIX}"


def write_ack(spool_dir: str | os.PathLike[str], stream: str, seq: int) -> None:
    """Record (atomically) that records up to ``seq`` of ``stream`` are committed to the store."""
    import fcntl  # why: POSIX only, and only ingesters write acks

    target = ack_path(spool_dir, stream)
    dir_fd = os.open(spool_dir, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # no flock here (NFS without its lock daemon): unlocked
            fcntl.flock(dir_fd, fcntl.LOCK_EX)  # two ingesters must not move an ack backwards
        if read_ack(spool_dir, stream) >= seq:
            return
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(f"{seq}\n")
        os.replace(tmp, target)
    finally:
        os.close(dir_fd)  # closing releases the lock


def read_ack(spool_dir: str | os.PathLike[str], stream: str) -> int:
    try:
        return int(ack_path(spool_dir, stream).read_text().strip() or -1)
    except (OSError, ValueError):
        return -1


def wait_for_ack(
    spool_dir: str | os.PathLike[str], stream: str, seq: int, timeout: float = 60.0, alive: Any = None
) -> bool:
    """Poll the ack file until it reaches ``seq``; False on timeout or when ``alive()`` says no."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        if read_ack(spool_dir, stream) >= seq:
            return True
        if time.monotonic() >= deadline or (alive is not None and not alive()):
            return read_ack(spool_dir, stream) >= seq
        time.sleep(delay)
        delay = min(delay * 2, 0.01)


def refused_path(spool_dir: str | os.PathLike[str], stream: str) -> Path:
    return Path(spool_dir) / f"{stream}{REFUSED_SUFFIX}"


def write_refused(spool_dir: str | os.PathLike[str], stream: str, seq: int, why: str) -> None:
    """Tell the writer of ``stream`` that (part of) its record ``seq`` was not stored, and why; its
    ``flush()`` reads this and returns False. Written before the ack that covers ``seq``."""
    line = json.dumps({"seq": seq, "why": why}, ensure_ascii=False) + "\n"
    with open(refused_path(spool_dir, stream), "a", encoding="utf-8") as fh:
        fh.write(line)


def read_refused(spool_dir: str | os.PathLike[str], stream: str, offset: int) -> tuple[list[str], int]:
    """Reasons written since byte ``offset``: (reasons, new offset)."""
    try:
        with open(refused_path(spool_dir, stream), "rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
    except OSError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    reasons = []
    for line in chunk[:end].splitlines():
        try:
            item = json.loads(line)
            reasons.append(f"record {item['seq']}: {item['why']}")
        except (ValueError, KeyError, TypeError):
            continue
    return reasons, offset + end
