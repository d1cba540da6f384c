"""The GPU path of the system-metrics sampler against a FAKE NVML.

This machine (and CI) has no NVIDIA GPU or driver, so `libnvidia-ml.so.1` cannot be loaded here.
``FakeNvml`` stands in for it: a Python object with the NVML functions the sampler calls, which
writes its answers into the caller's memory with the C structures' layouts (nvmlProcessInfo_v1_t is
16 bytes, the v2/v3 layout 24), returns NVML's error codes, and says "too small" when the array
is. What it cannot show is how a real driver behaves; docs/checkpoints.md says so."""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from phalanx.machine import sysmetrics
from phalanx.machine.sysmetrics import Sampler, SystemMetrics, Target
from phalanx.spool import decode_points, read_records

SUCCESS, INVALID_ARGUMENT, DRIVER_NOT_LOADED, INSUFFICIENT_SIZE, GPU_IS_LOST = 0, 2, 9, 7, 15
NOT_AVAILABLE = (1 << 64) - 1
MIB = 1 << 20
HANDLE_BASE = 0x5000  # the fake's device handles are HANDLE_BASE + index


@dataclass
class FakeDevice:
    util: int
    procs: list[tuple[int, int]]  # (pid, bytes of memory)
    lost: bool = False  # NVML_ERROR_GPU_IS_LOST on every query


def _addr(arg: Any) -> int:
    """The address a C function would get for ``byref(x)`` or an array passed as is."""
    return ctypes.addressof(getattr(arg, "_obj", arg))


def _write(arg: Any, data: bytes, offset: int = 0) -> None:
    ctypes.memmove(_addr(arg) + offset, data, len(data))


@dataclass
class FakeNvml:
    """A stand-in for libnvidia-ml loaded through ctypes (see the module docstring)."""

    devices: list[FakeDevice]
    getters: tuple[str, ...] = ("v3", "v2", "v1")  # which process getters this "driver" exports
    init_rc: int = SUCCESS
    broken_handles: set[int] = field(default_factory=set)
    raise_on_util: bool = False
    calls: list[str] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        # ctypes.CDLL raises AttributeError for a symbol the library does not export
        suffix = {
            "nvmlDeviceGetComputeRunningProcesses_v3": "v3",
            "nvmlDeviceGetComputeRunningProcesses_v2": "v2",
            "nvmlDeviceGetComputeRunningProcesses": "v1",
        }.get(name)
        if suffix is None or suffix not in self.getters:
            raise AttributeError(name)

        def getter(handle: ctypes.c_void_p, count: Any, infos: Any) -> int:
            return self._processes(suffix, handle, count, infos)

        return getter

    def _device(self, handle: ctypes.c_void_p) -> FakeDevice | None:
        index = (handle.value or 0) - HANDLE_BASE
        return self.devices[index] if 0 <= index < len(self.devices) else None

    def nvmlInit_v2(self) -> int:
        self.calls.append("init")
        return self.init_rc

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        _write(count, struct.pack("I", len(self.devices)))
        return SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, handle: Any) -> int:
        if index in self.broken_handles:
            return GPU_IS_LOST
        _write(handle, struct.pack("P", HANDLE_BASE + index))
        return SUCCESS

    def _processes(self, version: str, handle: ctypes.c_void_p, count: Any, infos: Any) -> int:
        self.calls.append(f"procs-{version}")
        dev = self._device(handle)
        if dev is None:
            return INVALID_ARGUMENT
        if dev.lost:
            return GPU_IS_LOST
        capacity = struct.unpack("I", ctypes.string_at(_addr(count), 4))[0]
        _write(count, struct.pack("I", len(dev.procs)))
        if len(dev.procs) > capacity:
            return INSUFFICIENT_SIZE
        layout, size = ("=I4xQ", 16) if version == "v1" else ("=I4xQII", 24)
        for i, (pid, used) in enumerate(dev.procs):
            fields = (pid, used) if version == "v1" else (pid, used, 0xFFFFFFFF, 0xFFFFFFFF)
            _write(infos, struct.pack(layout, *fields), i * size)
        return SUCCESS

    def nvmlDeviceGetUtilizationRates(self, handle: ctypes.c_void_p, util: Any) -> int:
        self.calls.append("util")
        if self.raise_on_util:
            raise ctypes.ArgumentError("argument 2: wrong type")  # what a ctypes mismatch raises
        dev = self._device(handle)
        if dev is None or dev.lost:
            return GPU_IS_LOST
        _write(util, struct.pack("II", dev.util, 5))
        return SUCCESS

    def nvmlDeviceGetMemoryInfo(self, handle: ctypes.c_void_p, memory: Any) -> int:
        dev = self._device(handle)
        if dev is None or dev.lost:
            return GPU_IS_LOST
        used = sum(m for _, m in dev.procs if m != NOT_AVAILABLE)
        _write(memory, struct.pack("QQQ", 80 << 30, (80 << 30) - used, used))
        return SUCCESS


ME = os.getpid()
STRANGER = 999_999_999  # a pid of someone else's job on the same GPU


def gpu_values(sampler: Sampler, pid: int = ME) -> dict[str, float]:
    [(target, values)] = sampler.points([Target(pid, "worker-0", "worker", 0, 1)])
    assert target.replica == "worker-0"
    # the CPU, memory and process series are always there, GPU or not
    assert {"system/rss_mib", "system/threads", "system/processes"} <= {t for t, _ in values}
    return {t: v for t, v in values if t.startswith("system/gpu")}


def test_each_device_the_tree_uses_gets_its_own_series_under_the_drivers_index() -> None:
    nvml = FakeNvml(
        [
            FakeDevice(util=37, procs=[(ME, 512 * MIB), (STRANGER, 4096 * MIB)]),
            FakeDevice(util=99, procs=[(STRANGER, 1024 * MIB)]),  # not ours: no series
            FakeDevice(util=88, procs=[(ME, 1024 * MIB), (ME, 256 * MIB)]),  # two contexts of ours
        ]
    )
    got = gpu_values(Sampler(nvml_lib=nvml))
    assert got == {
        "system/gpu0_util_percent": 37.0,
        "system/gpu0_memory_mib": 512.0,
        "system/gpu2_util_percent": 88.0,
        "system/gpu2_memory_mib": 1280.0,
    }


def test_an_old_driver_with_only_the_v1_getter_is_read_with_the_v1_layout() -> None:
    # nvmlProcessInfo_v1_t is 16 bytes: reading it as the 24-byte v2 layout finds the second
    # process in the wrong place (it used to, and this replica's memory was missed)
    nvml = FakeNvml([FakeDevice(util=50, procs=[(STRANGER, 8 * MIB), (ME, 300 * MIB)])], getters=("v1",))
    assert gpu_values(Sampler(nvml_lib=nvml)) == {
        "system/gpu0_util_percent": 50.0,
        "system/gpu0_memory_mib": 300.0,
    }


def test_more_processes_than_the_first_array_holds_are_all_read() -> None:
    crowd = [(100_000 + i, MIB) for i in range(70)]
    nvml = FakeNvml([FakeDevice(util=10, procs=[*crowd, (ME, 64 * MIB)])])
    assert gpu_values(Sampler(nvml_lib=nvml)) == {
        "system/gpu0_util_percent": 10.0,
        "system/gpu0_memory_mib": 64.0,
    }


def test_memory_nvml_cannot_report_is_left_out_not_written_as_zero() -> None:
    nvml = FakeNvml([FakeDevice(util=20, procs=[(ME, NOT_AVAILABLE)])])
    assert gpu_values(Sampler(nvml_lib=nvml)) == {"system/gpu0_util_percent": 20.0}


def test_a_device_whose_handle_fails_keeps_the_others_numbered_as_the_driver_numbers_them() -> None:
    nvml = FakeNvml(
        [FakeDevice(util=1, procs=[(ME, MIB)]), FakeDevice(util=42, procs=[(ME, 2 * MIB)])],
        broken_handles={0},
    )
    assert gpu_values(Sampler(nvml_lib=nvml)) == {
        "system/gpu1_util_percent": 42.0,
        "system/gpu1_memory_mib": 2.0,
    }


def test_a_lost_gpu_costs_its_series_of_that_look_only() -> None:
    lost = FakeDevice(util=70, procs=[(ME, 8 * MIB)], lost=True)
    nvml = FakeNvml([lost])
    sampler = Sampler(nvml_lib=nvml)
    assert gpu_values(sampler) == {}
    lost.lost = False  # back (a reset): the next look has it again
    assert gpu_values(sampler) == {"system/gpu0_util_percent": 70.0, "system/gpu0_memory_mib": 8.0}


@pytest.fixture
def no_library(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def missing() -> Any:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(sysmetrics, "_load_nvml", missing)
    yield


def test_without_nvidias_library_there_are_no_gpu_series_and_nothing_raises(no_library: None) -> None:
    sampler = Sampler()
    assert gpu_values(sampler) == {} and gpu_values(sampler) == {}


def test_a_library_that_fails_to_initialise_is_not_asked_again() -> None:
    nvml = FakeNvml([FakeDevice(util=1, procs=[(ME, MIB)])], init_rc=DRIVER_NOT_LOADED)
    sampler = Sampler(nvml_lib=nvml)
    assert gpu_values(sampler) == {} and gpu_values(sampler) == {}
    assert nvml.calls == ["init"]


def test_a_library_that_raises_turns_gpu_sampling_off_and_the_rest_goes_on() -> None:
    nvml = FakeNvml([FakeDevice(util=1, procs=[(ME, MIB)])], raise_on_util=True)
    sampler = Sampler(nvml_lib=nvml)
    assert gpu_values(sampler) == {}  # used to raise out of points(): the look lost CPU and RSS too
    asked = len(nvml.calls)
    assert gpu_values(sampler) == {}
    assert len(nvml.calls) == asked  # not asked again on later looks


def test_the_supervisors_sampler_writes_the_gpu_series_to_the_replicas_spool_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml = FakeNvml([FakeDevice(util=61, procs=[(ME, 2048 * MIB)])])
    monkeypatch.setattr(sysmetrics, "_load_nvml", lambda: nvml)  # what ctypes.CDLL would return
    metrics = SystemMetrics(tmp_path, "exp1", lambda: [Target(ME, "worker-0", "worker", 0, 1)], interval=60)
    try:
        assert metrics.look() > 0
    finally:
        metrics.stop()
    records, _ = read_records(metrics.writer.path, 0)
    got = {}
    for r in records:
        assert (r["replica"], r["rank"]) == ("worker-0", 1)
        keys, idx, _steps, values, _times = decode_points(r["data"])
        for i, value in enumerate(values):
            title, series = keys[idx[i] if idx is not None else 0]
            assert series == "worker-0"
            got[title] = value
    assert got["system/gpu0_util_percent"] == 61.0 and got["system/gpu0_memory_mib"] == 2048.0
