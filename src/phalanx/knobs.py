"""Tuning knobs: the PHALANX_* variables that tune how this machine runs Phalanx, typed in one table.

Each knob is read when it is used (a test or a user may change the environment between calls) and
a malformed value is a user's mistake, said with the variable's name and what it expects (exit 2),
where before some were silently replaced by their default. ``check()`` reads them all, so `phalanx
run` refuses a bad one before anything starts rather than a supervisor meeting it minutes later.

Standard library only: the SDK copy shipped to replicas (sdkcopy.SDK_TOP_MODULES)
includes it. Not pydantic-settings: every CLI command would pay its import (docs/cli-speed.md).
The variables that are the contract with replicas (PHALANX_EXPERIMENT_ID, PHALANX_RANK, ...) are not
knobs: DESIGN.md and docs/tracking.md list them. docs/configuration.md lists these; a unit test
keeps that page and this table in step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from phalanx.errors import UsageError

T = TypeVar("T")


@dataclass(frozen=True)
class Knob(Generic[T]):
    env: str
    parse: Callable[[str], T]  # raises ValueError for a malformed value
    default: T
    expects: str  # what a valid value is, for the error message
    meaning: str  # one line for docs/configuration.md

    def is_set(self) -> bool:
        """Whether the environment gives a value (rather than leaving the default)."""
        return bool(os.environ.get(self.env, "").strip())

    def value(self) -> T:
        raw = os.environ.get(self.env, "").strip()
        if not raw:
            return self.default
        try:
            return self.parse(raw)
        except ValueError:
            shown = "unset" if self.default is None else repr(self.default)
            raise UsageError(
                f"{self.env}={raw!r}: expected {self.expects}; fix it, or unset it for the default ({shown})"
            ) from None


def _number(kind: Callable[[str], float], minimum: float, above: bool = False) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = kind(raw)
        if value != value or value < minimum or (above and value == minimum):  # NaN, below, at an open end
            raise ValueError(raw)
        return value

    return parse


def _whole(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        if not raw.isdigit() or int(raw) < minimum:
            raise ValueError(raw)
        return int(raw)

    return parse


def _version(raw: str) -> str:
    if not all(part.isdigit() for part in raw.split(".")) or raw.count(".") > 3:
        raise ValueError(raw)
    return raw


def _url(raw: str) -> str:
    if not raw.startswith(("http://", "https://")):
        raise ValueError(raw)
    return raw


def _path(raw: str) -> Path | None:
    return Path(raw).expanduser()


DEFAULT_SAMPLE_SECONDS = 5.0  # how often a replica's system series are sampled, unless told


def _sample_interval(raw: str) -> float | None:
    if raw.lower() in ("0", "off", "false", "no"):
        return None
    return max(1.0, _number(float, 0.0, above=True)(raw))  # steps are whole seconds: a look a second at most


STALL_NOTICE: Knob[float] = Knob(
    "PHALANX_STALL_NOTICE",
    _number(float, 0.0),
    600.0,
    "seconds >= 0 (0: off)",
    "seconds without progress (no step, output or CPU time) after which a stalled replica is named on"
    " `phalanx get`, the UI and the alert hooks (a file's run.stall_notice wins)",
)
HANG_TIMEOUT: Knob[float] = Knob(
    "PHALANX_HANG_TIMEOUT",
    _number(float, 0.0),
    1800.0,
    "seconds >= 0 (0: off)",
    "seconds without progress (no step, output or CPU time) after which a hung replica fails its"
    " experiment (a file's run.hang_timeout wins)",
)
ALERT_COMMAND: Knob[str | None] = Knob(
    "PHALANX_ALERT_COMMAND",
    str,
    None,
    "a shell command",
    "run for each alert (a stalled or hung replica) with the alert as JSON on its standard input",
)
ALERT_URL: Knob[str | None] = Knob(
    "PHALANX_ALERT_URL",
    _url,
    None,
    "an http(s) URL",
    "POSTed each alert as JSON, with a `text` field as Slack and Mattermost incoming webhooks read it",
)
STORE_RETRY_SECONDS: Knob[float] = Knob(
    "PHALANX_STORE_RETRY_SECONDS",
    _number(float, 0.0, above=True),
    30.0,
    "seconds > 0",
    "how long a supervisor retries a status write while the store is down (an outcome's: then spooled)",
)
SQLITE_CACHE_KIB: Knob[int] = Knob(
    "PHALANX_SQLITE_CACHE_KIB",
    _whole(256),
    65536,
    "a whole number of KiB, at least 256",
    "the SQLite page cache of each store connection",
)
MAX_PENDING_POINTS: Knob[int] = Knob(
    "PHALANX_MAX_PENDING_POINTS",
    _whole(1),
    4_000_000,
    "a whole number of points, at least 1",
    "points the SDK keeps in memory while the spool's disk is full (about 40 bytes each)",
)
WAIT_NOTICE: Knob[float] = Knob(
    "PHALANX_WAIT_NOTICE",
    _number(float, 0.0),
    1800.0,
    "seconds >= 0 (0: off)",
    "seconds in this machine's queue after which a waiting run is told to its project's alert hooks"
    " with why it waits (its project's quota, the cores it needs)",
)
STRAGGLER_THRESHOLD: Knob[float] = Knob(
    "PHALANX_STRAGGLER_THRESHOLD",
    _number(float, 0.0, above=True),
    20.0,
    "a percentage > 0",
    "how much slower than the median rank a rank must be to be called a straggler",
)
MAX_REPLICAS: Knob[int] = Knob(
    "PHALANX_MAX_REPLICAS",
    _whole(1),
    1024,
    "a whole number of replicas, at least 1",
    "the most replicas one experiment may have (a file asking for more is refused as a likely typo)",
)
DEFAULT_TORCH: Knob[str] = Knob(
    "PHALANX_DEFAULT_TORCH",
    _version,
    "2.13.0",
    "a version such as 2.13.0",
    "the torch version framework estimators pin when they build an environment",
)
WHEELS_DIR: Knob[Path | None] = Knob(
    "PHALANX_WHEELS_DIR",
    _path,
    None,
    "a folder",
    "where built wheels (Horovod) are kept; default ~/.cache/phalanx/wheels, shared by every PHALANX_HOME",
)
HOROVOD_WHEEL: Knob[Path | None] = Knob(
    "PHALANX_HOROVOD_WHEEL",
    _path,
    None,
    "a .whl file",
    "a Horovod wheel to install instead of building one",
)

SYSTEM_METRICS: Knob[float | None] = Knob(
    "PHALANX_SYSTEM_METRICS",
    _sample_interval,
    DEFAULT_SAMPLE_SECONDS,
    "seconds > 0 between samples, or off",
    "how often each replica's CPU, memory and GPU use are sampled into its experiment (off: never,"
    " as `phalanx run --no-system-metrics`; under 1 s is 1 s)",
)
GPU_DEVICES_DIR: Knob[Path | None] = Knob(
    "PHALANX_GPU_DEVICES_DIR",
    _path,
    None,
    "a folder",
    "where a box takes a replica's GPU device nodes (nvidia0, nvidiactl...) from; default /dev",
)
BUILD_HEARTBEAT: Knob[float] = Knob(
    "PHALANX_BUILD_HEARTBEAT",
    _number(float, 0.0, above=True),
    30.0,
    "seconds > 0",
    "the longest an environment build's console stays silent: while pip says nothing, a"
    " `still building` line with the time and pip's last line comes this often",
)
INGEST_HELPERS: Knob[int | None] = Knob(
    "PHALANX_INGEST_HELPERS",
    _whole(0),
    None,
    "a whole number of processes, at least 0",
    "the most helper processes a run's ingester starts while several replicas report faster than it"
    " stores (0: never; unset: one per other core it may use, at most 3; only on a SQLite store)",
)

KNOBS: tuple[Knob[Any], ...] = (
    STALL_NOTICE,
    HANG_TIMEOUT,
    ALERT_COMMAND,
    ALERT_URL,
    STORE_RETRY_SECONDS,
    SQLITE_CACHE_KIB,
    MAX_PENDING_POINTS,
    WAIT_NOTICE,
    STRAGGLER_THRESHOLD,
    MAX_REPLICAS,
    DEFAULT_TORCH,
    WHEELS_DIR,
    HOROVOD_WHEEL,
    SYSTEM_METRICS,
    GPU_DEVICES_DIR,
    BUILD_HEARTBEAT,
    INGEST_HELPERS,
)


def check() -> None:
    """Every knob read once: the first malformed one raises UsageError (exit 2)."""
    for knob in KNOBS:
        knob.value()
