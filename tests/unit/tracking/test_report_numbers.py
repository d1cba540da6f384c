"""What ``report_scalar`` stores for the numbers a training loop hands it: plain ints and floats as
they are, anything else (a tensor, a numpy number, a bool) read and made plain at the call, and a
step the spool cannot hold dropped alone, with a reason, keeping the points around it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.tracking.client import Reporter
from phalanx.tracking.identity import Identity
from phalanx.tracking.task import Task
from tests.support.spooled import scalar_points


class Tensorish:
    """A 0-d tensor: its value can change after the call (an in-place update)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        return self.value


class Indexish:
    """A numpy integer: an int by ``__index__``, not a subclass of int."""

    def __index__(self) -> int:
        return 7


@pytest.fixture
def task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Task]:
    monkeypatch.setattr(Reporter.__init__, "__kwdefaults__", {"interval": 600.0})  # drains: the test's
    ident = Identity("0123456789ab", "master", "master", 0, 0, tmp_path / "spool", None, None)
    made = Task(ident, owner=True, name="numbers", project="tests")
    try:
        yield made
    finally:
        made._reporter.close(wait=False)


def _stored(task: Task) -> list[tuple[str, str, int, float]]:
    task._reporter.drain()
    return scalar_points(task._reporter.writer.path)


def test_numbers_that_are_not_plain_are_read_at_the_call(task: Task) -> None:
    logger = task.get_logger()
    loss = Tensorish(0.25)
    logger.report_scalar("loss", "w", loss, Indexish())  # type: ignore[arg-type]
    loss.value = 9.0  # changed after the call: the point keeps what it was then
    logger.report_scalar("loss", "w", 3, True)
    logger.report_scalar("loss", "w", 0.5, 2)
    assert _stored(task) == [("loss", "w", 7, 0.25), ("loss", "w", 1, 3.0), ("loss", "w", 2, 0.5)]


def test_a_step_beyond_64_bits_is_dropped_alone_with_its_reason(task: Task) -> None:
    logger = task.get_logger()
    logger.report_scalar("loss", "w", 1.0, 1)
    logger.report_scalar("loss", "w", 2.0, 2**64)
    logger.report_scalar("loss", "w", 3.0, 3)
    assert _stored(task) == [("loss", "w", 1, 1.0), ("loss", "w", 3, 3.0)]
    dropped, reasons = task._reporter.problems.take()
    assert dropped == 1 and reasons


def test_a_value_that_is_not_a_number_is_refused_at_the_call(task: Task) -> None:
    with pytest.raises((TypeError, ValueError)):
        task.get_logger().report_scalar("loss", "w", "high", 1)  # type: ignore[arg-type]
    assert not task._reporter.scalars


def test_several_titles_at_a_step_are_stored_all_or_none(task: Task) -> None:
    logger = task.get_logger()
    with pytest.raises(ValueError):
        logger.report_scalars("w", [("loss", 1.0), ("lr", "high"), ("acc", 2.0)], 3)  # type: ignore[list-item]
    logger.report_scalars("w", [("loss", 1.0), ("acc", 2.0)], 4)
    assert _stored(task) == [("loss", "w", 4, 1.0), ("acc", "w", 4, 2.0)]
