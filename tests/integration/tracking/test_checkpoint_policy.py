"""save_checkpoint with a keep-best policy whose metric the call does not report: the checkpoint can
never be among the best, so the script is told (once), instead of the policy quietly keeping only
the latest ones."""

from __future__ import annotations

from tests.support.sandbox import Sandbox

SCRIPT = """
import warnings
from phalanx import Task
task = Task.init("examples", "checkpoints")
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for step in range(3):
        task.save_checkpoint({"step": step}, step=step, metrics={"loss": 1.0 / (step + 1)},
                             keep_best=1, metric="acuracy")
    task.save_checkpoint({"step": 9}, step=9, metrics={"loss": 0.1}, keep_last=2)  # no keep_best
print("WARNINGS", len(seen))
for w in seen:
    print("WARNING", w.message)
task.close()
"""


def test_keep_best_by_a_metric_the_checkpoint_lacks_warns_once_naming_what_was_reported(
    sandbox: Sandbox,
) -> None:
    done = sandbox.run(SCRIPT)
    assert done.returncode == 0, done.stderr
    assert "WARNINGS 1" in done.stdout, done.stdout
    assert "best 1 by 'acuracy'" in done.stdout and "(reported: loss)" in done.stdout
