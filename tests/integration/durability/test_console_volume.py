"""Every console line reaches the store, at volume: two replicas printing many short lines as fast
as they can end with each line stored exactly once, in order, and the experiment succeeded. (At
200,000 lines per replica the store used to get about three in four: the supervisor stopped waiting
for its log readers after 30 s and dropped what they still held.)"""

from __future__ import annotations

import os

from tests.integration.local.conftest import Phalanx

LINES = int(os.environ.get("PHALANX_TEST_CONSOLE_LINES", "200000"))  # per replica

SCRIPT = """
import os, sys
name = os.environ["PHALANX_REPLICA"]
out = sys.stdout
for i in range({lines}):
    out.write(f"{{name}} {{i}}\\n")
out.flush()
"""


def test_two_replicas_printing_many_lines_store_every_line_once_in_order(phalanx: Phalanx) -> None:
    phalanx.spec(SCRIPT.format(lines=LINES), name="spam.py")
    spec = phalanx.spec(
        "version: 1\nkind: experiment\nframework: pytorch\nenvironment:\n  replicas:\n    n_workers: 1\n"
        "run:\n  cmd: python spam.py\n"
    )
    done = phalanx.run("run", "-f", str(spec), "--no-system-metrics", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    exp = phalanx.only_experiment()
    store = phalanx.store()
    for replica in ("master", "worker-0"):
        texts = [line.text for line in store.logs(exp.id, replica=replica)]
        mine = [t for t in texts if t.startswith(f"{replica} ")]
        assert len(mine) == LINES, f"{replica}: {len(mine)} of {LINES} lines stored"
        assert mine == [f"{replica} {i}" for i in range(LINES)]
