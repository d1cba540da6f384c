"""The platform an experiment ran on, as its reproducibility record says it: what
``platform.platform()`` answers on Linux without the processor, for which it runs `uname -p`
(tests/unit starts no process: its conftest fails a test that does)."""

from __future__ import annotations

import platform
import sys

import pytest

from phalanx.repro import platform_name


@pytest.mark.skipif(sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="Linux with glibc")
def test_the_platform_is_named_as_the_standard_library_names_it() -> None:
    libc, version = platform.libc_ver()  # as platform.platform() finds it: in the interpreter's binary
    parts = (platform.system(), platform.release(), platform.machine(), "with", f"{libc}{version}")
    assert platform_name() == "-".join(parts)
