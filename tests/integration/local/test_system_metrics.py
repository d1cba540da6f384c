"""System metrics: the sampler's CPU % and RSS of a real process tree agree with /proc read at the
same moment, and `phalanx run` records system/... series for every replica (off with a flag)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from phalanx.machine.sysmetrics import Sampler, Target

from .conftest import Phalanx, wait_for

TREE = """
import subprocess, sys, time
ballast = bytearray(b"a" * (80 << 20))
child = subprocess.Popen([sys.executable, "-c",
    "import time; b = bytearray(b'c' * (40 << 20)); print('up', flush=True); time.sleep(120)"],
    stdout=subprocess.PIPE)
child.stdout.readline()
print("ready", flush=True)
end = time.time() + 60
while time.time() < end:
    pass
"""


def _proc_tree(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, todo = [root], [root]
    while todo:
        pid = todo.pop()
        kids = [p for p, pp in parents.items() if pp == pid]
        tree += kids
        todo += kids
    return tree


def _proc_rss_and_cpu(pids: list[int]) -> tuple[float, float]:
    """What /proc says of these processes: VmRSS summed (bytes) and utime+stime (+ reaped children)
    seconds. Only their own files: a walk of all of /proc between the sampler's look and ours would
    count CPU into the expected value that the sampler's interval does not have."""
    rss = cpu = 0.0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        rss += next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
        cpu += sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")
    return rss, cpu


def test_cpu_and_rss_agree_with_proc_at_the_same_moment() -> None:
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        tree = _proc_tree(proc.pid)
        assert len(tree) == 2, tree
        sampler = Sampler(with_gpu=False)
        target = Target(proc.pid, "master")

        def look() -> tuple[list[tuple[str, float]], float, float, float, float, float]:
            """The sampler's look, bracketed by ours: its CPU reading lies between cpu0 and cpu1,
            its instant between t0 and t1 (both counters only grow)."""
            rss, cpu0 = _proc_rss_and_cpu(tree)
            t0 = time.monotonic()
            [(_, values)] = sampler.points([target])
            t1 = time.monotonic()
            _, cpu1 = _proc_rss_and_cpu(tree)
            return values, rss, cpu0, t0, t1, cpu1

        _, rss_a, cpu_a0, t_a0, t_a1, cpu_a1 = look()
        time.sleep(2.0)
        values, rss_b, cpu_b0, t_b0, t_b1, cpu_b1 = look()
        got = dict(values)
        # the sampler's rate over its own instants lies between the inner window's CPU over the
        # outer window's time and the outer window's CPU over the inner window's time (+ 2 ticks)
        tick = 1 / os.sysconf("SC_CLK_TCK")
        low = (cpu_b0 - cpu_a1 - 2 * tick) / (t_b1 - t_a0) * 100
        high = (cpu_b1 - cpu_a0 + 2 * tick) / (t_b0 - t_a1) * 100
        assert low <= got["system/cpu_percent"] <= high, (got, low, high)
        assert got["system/cpu_percent"] > 5  # it saw the busy loop (however loaded the machine)
        expected_rss = (rss_a + rss_b) / 2 / (1 << 20)
        assert abs(got["system/rss_mib"] - expected_rss) <= 0.10 * expected_rss, (got, expected_rss)
        assert got["system/rss_mib"] > 120  # both processes' ballast is in it
        assert got["system/processes"] == 2 and got["system/threads"] >= 2
        assert sampler.cost_seconds < 0.5
    finally:
        for pid in _proc_tree(proc.pid)[::-1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        proc.wait(timeout=30)


def _two_replicas(phalanx: Phalanx) -> str:
    busy = (
        'python -c "import time; end = time.time() + 3; [0 for _ in iter(lambda: time.time() < end, False)]"'
    )
    return str(
        phalanx.spec(
            f"""
            version: 1
            kind: experiment
            framework: pytorch
            environment:
              replicas:
                n_workers: 1
            run:
              cmd: {json.dumps(busy)}
            """
        )
    )


def test_every_replica_gets_system_series_and_the_flag_turns_them_off(phalanx: Phalanx) -> None:
    """Also: a run shorter than one interval has CPU series for every replica. With the default 5 s
    interval, a 3 s run used to get RSS but no CPU series (CPU % needed two looks): the first look
    now comes after 1 s and gives the CPU since each replica started. (One run for both: at the
    default interval, which is what the second needs.)"""
    phalanx.env.pop("PHALANX_SYSTEM_METRICS", None)  # the default interval
    result = phalanx.run("run", "-f", _two_replicas(phalanx))
    assert result.returncode == 0, result.stderr[-2000:]
    store = phalanx.store()
    exp = phalanx.only_experiment()
    titles = wait_for(lambda: store.metric_titles(exp.id), what="system series")
    assert set(titles.get("system/cpu_percent", [])) == {"master", "worker-0"}, titles
    for title in ("system/cpu_percent", "system/rss_mib", "system/threads"):
        assert set(titles.get(title, [])) == {"master", "worker-0"}, titles
    cpu = store.metrics(exp.id, "system/cpu_percent")["system/cpu_percent"]
    assert max(cpu["master"].values) > 5  # a busy loop shows (2 cores shared by many: not 100)

    store.delete_experiment(exp.id)
    phalanx.env["PHALANX_SYSTEM_METRICS"] = "1"  # the flag wins over the environment's interval
    result = phalanx.run("run", "-f", _two_replicas(phalanx), "--no-system-metrics")
    assert result.returncode == 0, result.stderr[-2000:]
    exp = phalanx.only_experiment()
    assert not [t for t in store.metric_titles(exp.id) if t.startswith("system/")]


def test_the_first_look_at_a_replica_already_has_its_cpu_percent() -> None:
    """A replica living less than two looks (5 s apart by default: a short run, the last minutes
    of a restarted group) still gets a CPU series: its first point is the CPU since it started."""
    busy = "import time\nend = time.time() + 30\nwhile time.time() < end:\n    pass\n"
    proc = subprocess.Popen([sys.executable, "-c", busy])
    try:
        wait_for(lambda: _proc_rss_and_cpu([proc.pid])[1] >= 0.6, what="0.6 s of CPU")
        [(_, values)] = Sampler(with_gpu=False).points([Target(proc.pid, "master")])
        got = dict(values)
        assert "system/cpu_percent" in got, got
        # a busy loop on 2 shared cores: well above idle, at most one core
        assert 10 < got["system/cpu_percent"] <= 105, got
    finally:
        proc.kill()
        proc.wait(timeout=30)
