"""cpu and memory quantities: the seeds' plain numbers and Kubernetes' suffixed strings.

Memory numbers are MiB (as in Polyaxon's files); "512Mi", "2Gi", "1G", "500M" are Kubernetes
quantities converted to MiB. cpu numbers are cores; "500m" is milli-cores. Each parser raises
ValueError with a message a person can act on.
"""

from __future__ import annotations

import math
import re

from phalanx.suggest import did_you_mean

_MIB = float(2**20)
_MEMORY_UNITS: dict[str, float] = {
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\s*([A-Za-z]*)\s*$")


def _finite_non_negative(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected {what}, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    if number < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return number


def _finite(number: float, written: str) -> float:
    if not math.isfinite(number):
        raise ValueError(f"{written!r} is too large to be a size")
    return number


def parse_memory(value: object) -> float:
    """MiB from a number (MiB) or a Kubernetes quantity string."""
    if isinstance(value, str):
        m = _NUMBER.match(value)
        if not m:
            raise ValueError(f"{value!r} is not a memory size (use MiB as a number, or e.g. '512Mi', '2Gi')")
        number = _finite(float(m.group(1) + (m.group(2) or "")), value)
        unit = m.group(3)
        if not unit:
            return number  # "256" means 256 MiB, like the number 256
        if unit == "m":
            raise ValueError(f"{value!r}: 'm' means milli-bytes; did you mean 'Mi'?")
        if unit not in _MEMORY_UNITS:
            hint = did_you_mean(unit, _MEMORY_UNITS)
            raise ValueError(f"{value!r}: unknown unit '{unit}'{hint} (units: Ki, Mi, Gi, Ti, k, M, G, T)")
        return _finite(number * _MEMORY_UNITS[unit] / _MIB, value)
    return _finite_non_negative(value, "a memory size in MiB or a quantity like '512Mi'")


def parse_cpu(value: object) -> float:
    """Cores from a number or a string like '500m' (milli-cores) or '2'."""
    if isinstance(value, str):
        m = _NUMBER.match(value)
        if not m or m.group(3) not in ("", "m"):
            raise ValueError(
                f"{value!r} is not a cpu amount (use cores as a number, or milli-cores like '500m')"
            )
        number = _finite(float(m.group(1) + (m.group(2) or "")), value)
        return number / 1000 if m.group(3) == "m" else number
    return _finite_non_negative(value, "a number of cores or milli-cores like '500m'")


def parse_gpu(value: object) -> float:
    """Whole devices: GPUs cannot be shared between replicas."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"expected a whole number of GPUs, got {value!r}")
    if value < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return float(value)
