"""``machine.record.Record``: what the reaper's records (a replica's cgroup, a memory look, a tree
sample) need of a frozen dataclass: equal by their values, hashable, shown by name."""

from __future__ import annotations

import pytest

from phalanx.machine.cgroups import Cgroup
from phalanx.machine.proctree import MemoryUse, TreeSample


def test_records_are_equal_by_their_values_and_kind() -> None:
    assert Cgroup(("/a", "/b")) == Cgroup(("/a", "/b"), v2=False)
    assert Cgroup(("/a",)) != Cgroup(("/a",), v2=True)
    assert MemoryUse(1, 2, 3) == MemoryUse(pss=1, shm=2, rss=3, exact=True)
    assert MemoryUse(1, 2, 3) != MemoryUse(1, 2, 4)
    sample = TreeSample(1.0, 2.0, 3, 4, 5, 6, 7, 8)
    assert sample != MemoryUse(1, 2, 3) and sample == TreeSample(1.0, 2.0, 3, 4, 5, 6, 7, 8)
    assert len({Cgroup(("/a",)), Cgroup(("/a",)), Cgroup(("/b",))}) == 2


def test_a_record_is_read_only_once_made() -> None:
    group = Cgroup(("/a",))
    with pytest.raises(AttributeError, match=r"Cgroup\.v2 is read-only"):
        group.v2 = True
    assert group == Cgroup(("/a",)) and not group.v2


def test_a_record_is_shown_with_its_names_and_keeps_its_behaviour() -> None:
    use = MemoryUse(pss=10, shm=5, rss=12, exact=False)
    assert use.total == 15
    assert repr(use) == "MemoryUse(exact=False, pss=10, rss=12, shm=5)"
    assert repr(Cgroup(("/x",), v2=True)) == "Cgroup(folders=('/x',), v2=True)"
