"""A burst of submits against one `phalanx server`: does the list stay quick while they are taken?

    .venv/bin/python bench/submit_load.py [--submits 40] [--groups 4] [--json FILE] [--smoke]

A server on loopback over its own PHALANX_HOME. The anchor is the same server's idle list:
`GET /api/v1/experiments` timed back to back for a while before anything is submitted (its p50 and
p99). Then N submits (each a trivial one-replica experiment with its own code bundle; some of them
`kind: group` files of two trials) are sent at once from N threads, while the same list is timed
again, until every submit is answered; then the list keeps being timed while the launcher starts
what was accepted. Printed: the list's p50/p99 during the burst and during the start-up wave as
ratios of the idle ones (the target: p99 within 2x idle), the submits' answer times, and whether
every submitted experiment and group ran to its end (all N must). The load average is printed
with the figures: they depend on it.

Not run by the tests but as a smoke run (--smoke: 4 submits, one group); figures are in README.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Protocol

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from phalanx.apiclient import Client  # noqa: E402  (after the path: runs from a checkout)
from phalanx.bundles import pack  # noqa: E402

TOKEN = "bench-submit-load-0123456789"
CLI = [sys.executable, "-m", "phalanx.cli.main"]
EXPERIMENT = 'version: 1\nkind: experiment\nproject: load\nrun:\n  cmd: python -c "print({n})"\n'
GROUP = """version: 1
kind: group
project: load
hptuning:
  concurrency: 2
  grid_search: {{}}
  matrix:
    x: {{values: [1, 2]}}
run:
  cmd: python -c "print({n}, {{{{ x }}}})"
"""


def start_server(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    (home / "token").write_text(TOKEN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen(
        [*CLI, "server", "--port", "0", "--token-file", str(home / "token")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    for raw in proc.stdout:  # "Phalanx server on http://127.0.0.1:PORT/ ..."
        line = raw.decode(errors="replace")
        if "Phalanx server on " in line:
            url = line.split("Phalanx server on ", 1)[1].split()[0].rstrip("/")
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep its pipe drained
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # bound already; answering once uvicorn has started
                try:
                    urllib.request.urlopen(f"{url}/api/v1/health", timeout=5).close()
                    return proc, url
                except OSError:
                    time.sleep(0.1)
            break
    raise SystemExit("the server did not start")


def timed_list(url: str) -> float:
    req = urllib.request.Request(f"{url}/api/v1/experiments?limit=50")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    started = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()
    return time.perf_counter() - started


def sample(url: str, until: EventLike | float) -> list[float]:
    """List times back to back until ``until`` (an event set, or a monotonic deadline)."""
    out: list[float] = []
    while not (time.monotonic() > until if isinstance(until, float) else until.is_set()):
        out.append(timed_list(url))
    return out


class EventLike(Protocol):
    def is_set(self) -> bool: ...


class Sampler:
    """The list timed back to back in a process of its own until stopped: the submitting threads
    of this process never make it wait for this interpreter's lock (only the server can)."""

    def __init__(self, url: str) -> None:
        ctx = multiprocessing.get_context("fork")
        self._stop = ctx.Event()
        self._out, self._into = ctx.Pipe(duplex=False)  # (bench/queue.py hides the stdlib's queue)
        self._proc = ctx.Process(target=self._run, args=(url,), daemon=True)
        self._proc.start()

    def _run(self, url: str) -> None:
        self._into.send(sample(url, self._stop))

    def stop(self) -> list[float]:
        self._stop.set()
        if not self._out.poll(300):
            raise SystemExit("the list sampler did not answer")
        times: list[float] = self._out.recv()
        self._proc.join(timeout=60)
        return times


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def folders(root: Path, submits: int, groups: int) -> list[Path]:
    made = []
    for n in range(submits):
        folder = root / f"s{n}"
        folder.mkdir(parents=True)
        (folder / "train.py").write_text(f"# submit {n}\n")  # each its own bundle
        text = GROUP.format(n=n) if n < groups else EXPERIMENT.format(n=n)
        (folder / "exp.yml").write_text(text)
        made.append(folder)
    return made


def ended(client: Client, answers: list[dict[str, Any]]) -> bool:
    for a in answers:
        path = f"/groups/{a['id']}" if a["kind"] == "group" else f"/experiments/{a['id']}"
        if client.get(path)["status"] not in ("succeeded", "failed", "stopped"):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--submits", type=int, default=40)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.submits, args.groups, args.idle_seconds = 4, 1, 1.0
    with tempfile.TemporaryDirectory(prefix="phalanx-submit-load-") as tmp:
        root = Path(tmp)
        home = root / "home"
        home.mkdir()
        proc, url = start_server(home)
        try:
            client = Client(url, TOKEN)
            for _ in range(3):  # warm: imports, the first connections
                timed_list(url)
            idle = sample(url, time.monotonic() + args.idle_seconds)
            work = folders(root / "projects", args.submits, args.groups)
            bundles = [pack(f) for f in work]
            answers: list[dict[str, Any]] = [{} for _ in work]
            answer_s: list[float] = [0.0] * len(work)

            def submit(i: int) -> None:
                started = time.perf_counter()
                answers[i] = client.submit(work[i] / "exp.yml", bundles[i], {}, 0)
                answer_s[i] = time.perf_counter() - started

            timer = Sampler(url)  # forked before the submitting threads exist
            threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(work))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sampler = timer.stop()
            timer = Sampler(url)
            deadline = time.monotonic() + 1800
            while not ended(client, answers) and time.monotonic() < deadline:
                time.sleep(1)
            wave = timer.stop()
            ran = sum(1 for a in answers if a.get("created"))
            all_ended = ended(client, answers)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    load = os.getloadavg()[0]
    result = {
        "submits": args.submits,
        "groups": args.groups,
        "load_1min": round(load, 1),
        "idle_p50_ms": round(statistics.median(idle) * 1000, 1),
        "idle_p99_ms": round(p(idle, 0.99) * 1000, 1),
        "burst_p99_ratio": round(p(sampler or idle, 0.99) / p(idle, 0.99), 2),
        "wave_p99_ratio": round(p(wave or idle, 0.99) / p(idle, 0.99), 2),
        "answer_p50_ms": round(statistics.median(answer_s) * 1000, 1),
        "answer_max_ms": round(max(answer_s) * 1000, 1),
        "burst_samples": len(sampler),
        "created": ran,
        "all_ended": all_ended,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if ran == args.submits and all_ended else 1


if __name__ == "__main__":
    sys.exit(main())
