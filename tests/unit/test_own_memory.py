"""A replica's memory chart counts its leader by the memory it alone holds (machine.proctree.own_bytes):
a reaper forked from its supervisor shares most of its pages with it, which its RSS counts."""

from __future__ import annotations

import os

from phalanx.machine import proctree


def test_a_process_holds_alone_no_more_than_it_has_resident() -> None:
    own = proctree.own_bytes(os.getpid())
    assert own is not None and own > 0
    assert own <= proctree.sample_tree([os.getpid()], 0.0, with_pss=False).rss


def test_a_process_that_is_gone_has_no_own_memory() -> None:
    assert proctree.own_bytes(2**22 + 1) is None  # above the kernel's pid_max default
