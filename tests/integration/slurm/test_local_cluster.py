"""The local two-node cluster the Slurm tests run on (scripts/slurm-local, tests/support/slurm.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.slurm import LocalSlurm

from phalanx.machine.ports import LOWEST, RANGE_FILE


def test_its_daemons_ports_lie_below_the_kernels_ephemeral_ports_each_its_own(
    slurm_cluster: LocalSlurm,
) -> None:
    """Its ports are picked before its daemons bind them, seconds later (slurmd starts once
    slurmctld answers): a port of the kernel's ephemeral range may meanwhile become the source port
    of any process's outgoing connection (the other test worker's clients of its servers), and the
    daemon that should listen there fails to start. Picked as phalanx.machine.ports.free_port picks
    (below that range, at random), and no two the same."""
    conf = slurm_cluster.conf.read_text()
    ports = [int(p) for p in re.findall(r"(?:SlurmctldPort|SlurmdPort|\bPort)=(\d+)", conf)]
    low = int(Path(RANGE_FILE).read_text().split()[0])
    assert len(ports) == 4 and len(set(ports)) == 4, conf
    assert all(LOWEST <= p < low for p in ports), (ports, low)
