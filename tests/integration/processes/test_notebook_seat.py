"""A notebook's seat joins its cgroup before anything of it runs: the shell that ``Seat.command``
puts in front writes its own pid into every folder of the cgroup, then becomes the program; one
it cannot join stops it before the program runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from phalanx.machine.cgroups import Cgroup
from phalanx.machine.ledger import Grant
from phalanx.services.seats import Seat


def test_a_seat_with_a_cgroup_starts_its_command_inside_it(tmp_path: Path) -> None:
    folders = [tmp_path / "memory", tmp_path / "cpu"]  # as a cgroup's folders take a pid written there
    for folder in folders:
        folder.mkdir()
    seat = Seat("notebook-a", Grant(), Cgroup(tuple(str(f) for f in folders)))
    said = subprocess.run(
        seat.command(["/bin/sh", "-c", "echo $$"]), capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert [(f / "cgroup.procs").read_text().strip() for f in folders] == [said, said]  # it became it
    assert Seat("notebook-a", Grant()).command(["x"]) == ["x"]


def test_a_seat_whose_cgroup_cannot_be_joined_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    seat = Seat("notebook-a", Grant(), Cgroup((str(tmp_path / "memory"), str(tmp_path / "gone"))))
    ran = tmp_path / "ran"
    done = subprocess.run(seat.command(["touch", str(ran)]), capture_output=True, text=True, timeout=60)
    assert done.returncode == 126 and "gone/cgroup.procs" in done.stderr
    assert not ran.exists()  # nothing runs outside its cap
