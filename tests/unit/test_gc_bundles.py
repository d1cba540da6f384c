"""`phalanx gc` and the server's sweep remove uploaded code bundles no experiment needs (issue 24
item 8): a bundle an experiment the store holds ran stays, one whose experiment was deleted (or that
no submission recorded) goes once older than the grace period, and so do the working folders of
experiments no longer held."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from phalanx import gc
from phalanx.bundles import BundleStore
from phalanx.config import Settings
from phalanx.store import open_store
from phalanx.store.base import LocalStore
from phalanx.store.submissions import Acceptance, NewExperiment, Submission, SubmissionKind


def _submitted(store: LocalStore, name: str, experiment_id: str, bundle: str) -> None:
    """An experiment the server accepted, with the bundle it runs."""
    now = time.time()
    submission = Submission(experiment_id, SubmissionKind.EXPERIMENT, bundle, now)
    record = NewExperiment(experiment_id, name, "p", [], None, "local", None, [], {}, "", {})
    store.accept(Acceptance(submission, record), now)


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (then, then))


def test_gc_removes_an_orphan_bundle_and_keeps_the_one_an_experiment_ran(
    phalanx_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings()
    store = open_store(settings)
    bundles = BundleStore(settings.home / "server" / "bundles")
    used, deleted_ones, never = bundles.put(b"used"), bundles.put(b"deleted"), bundles.put(b"orphan")
    _submitted(store, "kept", "aaaaaaaaaaaa", used)
    _submitted(store, "gone", "bbbbbbbbbbbb", deleted_ones)
    kept, gone = store.get_experiment("aaaaaaaaaaaa"), store.get_experiment("bbbbbbbbbbbb")
    recent = time.time()
    for exp_id in (kept.id, gone.id):
        (settings.home / "server" / "work" / exp_id).mkdir(parents=True)
        (settings.home / "server" / "work" / exp_id / "train.py").write_text("pass\n")
    store.delete_experiment(gone.id)
    young = bundles.put(b"just uploaded")  # a submit in progress: its row is not written yet

    # within the grace period nothing goes: the deleted experiment's submission is recent
    done = gc.collect(store, settings, min_age=600, vacuum=False)
    assert done.bundles == [] and done.work_folders == []

    for sha in (used, deleted_ones, never):
        _age(bundles.path(sha), 3600)
    _age(settings.home / "server" / "work", 3600)
    # an hour later (as the clock of the sweep sees it)
    monkeypatch.setattr(gc.time, "time", lambda: recent + 3600)
    os.utime(bundles.path(young), (recent + 3599, recent + 3599))
    done = gc.collect(store, settings, min_age=600, vacuum=False)
    assert sorted(done.bundles) == sorted([deleted_ones, never])
    assert done.work_folders == [gone.id]
    assert bundles.path(used).exists() and bundles.path(young).exists()
    assert not bundles.path(deleted_ones).exists() and not bundles.path(never).exists()
    assert (settings.home / "server" / "work" / kept.id / "train.py").exists()
    assert done.to_json()["bundles"] == done.bundles
