"""What a TensorBoard service shows: the scalars Phalanx recorded, written as TensorBoard event files.

A board is made for one target (an experiment, a group's trials, a project's experiments) and
renders into its own folder one TensorBoard run per experiment (``<name>-<id8>``), tag
``TITLE/SERIES`` (``TITLE`` when the series is named as its chart), each point at its step and
wall time. ``render()`` writes what was reported since the last call (the refresher of
phalanx.server.services calls it every few seconds while the service lives), so a running
experiment's curves grow in TensorBoard as they do in the UI.

Why render from the store rather than read the event files replicas wrote: the store holds every
scalar of every replica on every engine (a Slurm node's or a pod's files never reach the server's
disk), including what TensorBoard capture, Lightning, Keras and `Run.log` sent; the files a script
wrote, where there are any, hold nothing more of scalars. The images and histograms the Logger
recorded (``report_image``, ``report_matplotlib_figure``, ``report_histogram``) are rendered too
(phalanx.services.board_samples), each once, at its step.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tensorboard.compat.proto import event_pb2, summary_pb2  # the `tensorboard` extra
from tensorboard.summary.writer.record_writer import RecordWriter

from phalanx.domain import Experiment
from phalanx.errors import NotFound
from phalanx.services.board_samples import SHOWN, sample_values
from phalanx.services.targets import Target
from phalanx.store.base import Store

# points read per chart and render: a first render of a long run reads its summary, not every point
MAX_POINTS = 10_000
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_name(experiment: Experiment) -> str:
    """The experiment's run folder: its name (made safe for a path) and short id."""
    name = _UNSAFE.sub("_", experiment.name or "experiment").strip("._") or "experiment"
    return f"{name[:60]}-{experiment.id[:8]}"


def tag_of(title: str, series: str) -> str:
    return title if series == title else f"{title}/{series}"


@dataclass
class _Run:
    """One experiment's event file and the last step written of each tag."""

    folder: Path
    file: BinaryIO
    writer: RecordWriter
    last: dict[str, int] = field(default_factory=dict)
    samples: set[str] = field(default_factory=set)  # the reports (images, histograms) written
    done: bool = False  # ended and rendered after its end: nothing more will come


class Board:
    """Renders ``target``'s experiments from ``store`` into ``folder`` (one subfolder per run)."""

    def __init__(self, store: Store, target: Target, folder: Path) -> None:
        self.store = store
        self.target = target
        self.folder = folder
        self._runs: dict[str, _Run] = {}

    def render(self) -> int:
        """Write every point reported since the last call; returns how many were written."""
        written = 0
        experiments = self.target.experiments(self.store)
        for gone in set(self._runs) - {e.id for e in experiments}:  # deleted since: off the board
            run = self._runs.pop(gone)
            run.writer.close()
            shutil.rmtree(run.folder, ignore_errors=True)
        for experiment in experiments:
            run = self._runs.get(experiment.id) or self._open(experiment)
            if run.done:
                continue
            ended = experiment.status.done  # read before the points: none can follow them
            written += self._write_new(experiment.id, run)
            written += self._write_samples(experiment.id, run)
            run.writer.flush()
            run.done = ended
        return written

    def close(self) -> None:
        for run in self._runs.values():
            run.writer.close()
        self._runs.clear()

    def _open(self, experiment: Experiment) -> _Run:
        folder = self.folder / run_name(experiment)
        folder.mkdir(parents=True, exist_ok=True)
        file = open(folder / f"events.out.tfevents.{int(time.time())}.phalanx", "ab")  # noqa: SIM115
        run = _Run(folder=folder, file=file, writer=RecordWriter(file))
        header = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
        run.writer.write(header.SerializeToString())
        self._runs[experiment.id] = run
        return run

    def _write_new(self, experiment_id: str, run: _Run) -> int:
        written = 0
        for title, names in self.store.metric_titles(experiment_id).items():
            lasts = [run.last.get(tag_of(title, s)) for s in names]
            after = None if None in lasts else min(v for v in lasts if v is not None)
            views = self.store.metric_view(
                experiment_id, title, x_min=None if after is None else after + 1, max_points=MAX_POINTS
            )
            for series, view in views.items():
                tag = tag_of(title, series)
                last = run.last.get(tag)
                points = view.series
                times = points.times or [0.0] * len(points.steps)
                for step, value, at in zip(points.steps, points.values, times, strict=False):
                    if last is not None and step <= last:
                        continue
                    value_pb = summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
                    event = event_pb2.Event(
                        wall_time=at, step=int(step), summary=summary_pb2.Summary(value=[value_pb])
                    )
                    run.writer.write(event.SerializeToString())
                    run.last[tag] = int(step)
                    written += 1
        return written

    def _write_samples(self, experiment_id: str, run: _Run) -> int:
        """Each image and histogram report not written yet, at its step and time."""
        files = self.store.artifact_store
        if files is None:
            return 0
        written = 0
        for record in self.store.artifacts(experiment_id):
            meta = record.metadata
            if record.kind != "report" or record.name in run.samples or meta.get("report") not in SHOWN:
                continue
            run.samples.add(record.name)
            tag = tag_of(str(meta.get("title")), str(meta.get("series")))
            if meta.get("rank"):  # rank 0's (or a plain script's) is the report's own tag
                tag = f"{tag}/rank{meta['rank']}"
            try:
                values = sample_values(str(meta["report"]), tag, files.read_bytes(experiment_id, record.path))
            except NotFound:  # deleted meanwhile
                continue
            if values:
                event = event_pb2.Event(
                    wall_time=record.time,
                    step=int(meta.get("step") or 0),
                    summary=summary_pb2.Summary(value=values),
                )
                run.writer.write(event.SerializeToString())
                written += 1
        return written
