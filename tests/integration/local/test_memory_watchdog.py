"""The memory watchdog counts each page once: a forked tree sharing one buffer fits a limit its
proportional set size fits (RSS summed per process would not), and /dev/shm files held by the
replica count against its limit."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from phalanx.machine.proctree import MemoryWatch

from .conftest import Phalanx

FORKED = """
import os, sys, time
buf = bytearray(b"x" * (120 << 20))   # 120 MiB, touched, then shared copy-on-write by 3 children
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        time.sleep(3)                  # the watchdog looks every 0.25 s
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
print("shared fits", len(buf), flush=True)
"""

SHM_HOLDER = """
import os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
chunk = b"y" * (16 << 20)
for _ in range(20):                   # 320 MiB in /dev/shm, never mapped, kept open
    os.write(fd, chunk)
print("held", flush=True)
time.sleep(60)
"""


def _spec(phalanx: Phalanx, script: str, limit_mib: int, args: str = "") -> Path:
    folder = phalanx.tmp / "exp"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.py").write_text(script)
    return phalanx.spec(
        f"""
        version: 1
        kind: experiment
        environment:
          resources:
            memory:
              limits: {limit_mib}
        run:
          cmd: python job.py {args}
        """
    )


def test_a_forked_tree_sharing_a_buffer_is_not_killed_under_a_limit_its_pss_fits(phalanx: Phalanx) -> None:
    # RSS summed over the 4 processes is about 4 x 120 MiB = 480 MiB > 300 MiB; PSS is about 130 MiB
    result = phalanx.run("run", "-f", str(_spec(phalanx, FORKED, 300)))
    exp = phalanx.only_experiment()
    assert result.returncode == 0, (exp.reason, result.stderr[-2000:])
    assert exp.status == "succeeded"


def test_dev_shm_files_held_by_a_replica_count_against_its_limit(phalanx: Phalanx) -> None:
    path = Path("/dev/shm") / f"phalanx-test-{uuid.uuid4().hex[:8]}"
    try:
        result = phalanx.run("run", "-f", str(_spec(phalanx, SHM_HOLDER, 200, str(path))), timeout=120)
        exp = phalanx.only_experiment()
        assert result.returncode == 1, result.stderr[-2000:]
        assert exp.reason.startswith("master memory limit 200Mi exceeded"), exp.reason
    finally:
        path.unlink(missing_ok=True)


def test_a_closed_dev_shm_file_seen_open_once_still_counts_until_removed(tmp_path: Path) -> None:
    path = Path("/dev/shm") / f"phalanx-test-{uuid.uuid4().hex[:8]}"
    watch = MemoryWatch()
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.write(fd, b"z" * (8 << 20))
        held = watch.usage([os.getpid()])
        assert held.shm >= 8 << 20
        os.close(fd)
        assert watch.usage([os.getpid()]).shm >= 8 << 20  # closed, still in /dev/shm: still held
        path.unlink()
        assert watch.usage([os.getpid()]).shm < 8 << 20  # removed: freed
    finally:
        path.unlink(missing_ok=True)
