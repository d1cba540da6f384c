"""cpu and memory: the seeds' numbers and Kubernetes quantities, all in cores and MiB."""

from __future__ import annotations

import pytest

from phalanx.spec.quantities import parse_cpu, parse_gpu, parse_memory


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        (256, 256.0),
        (0.5, 0.5),
        ("256", 256.0),
        ("512Mi", 512.0),
        ("2Gi", 2048.0),
        ("1Ti", 1024.0 * 1024),
        ("1024Ki", 1.0),
        ("1G", 1e9 / 2**20),
        ("500M", 500e6 / 2**20),
        ("1.5Gi", 1536.0),
        ("1e3Mi", 1000.0),
    ],
)
def test_memory_is_mib(value: object, mib: float) -> None:
    assert parse_memory(value) == pytest.approx(mib)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("512m", "did you mean 'Mi'"),
        ("2GiB", "did you mean 'Gi'"),
        ("lots", "not a memory size"),
        (-1, "must not be negative"),
        (float("inf"), "finite"),
        ("1e400", "too large to be a size"),  # YAML reads it as text: still a number, too large
        ("1e306Ti", "too large to be a size"),
        (True, "expected"),
    ],
)
def test_bad_memory_says_why(value: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_memory(value)


@pytest.mark.parametrize(
    ("value", "cores"), [(1, 1.0), (0.5, 0.5), ("500m", 0.5), ("2", 2.0), ("250m", 0.25)]
)
def test_cpu_is_cores(value: object, cores: float) -> None:
    assert parse_cpu(value) == cores


@pytest.mark.parametrize("value", ["2Gi", "fast", -1, "m", "1e400"])
def test_bad_cpu_is_refused(value: object) -> None:
    with pytest.raises(ValueError):
        parse_cpu(value)


def test_gpus_are_whole_devices() -> None:
    assert parse_gpu(2) == 2.0
    assert parse_gpu(1.0) == 1.0
    for bad in (0.5, -1, "1", True):
        with pytest.raises(ValueError):
            parse_gpu(bad)
