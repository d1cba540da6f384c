"""StopRequests: a signal or the stop file asks the supervisor to stop, and the reason it records
says which (the file's own reason, a group's pruning, wins)."""

from __future__ import annotations

import signal
from pathlib import Path

from phalanx.config import Settings
from phalanx.supervisor.stopping import StopRequests, write_stop_request


def test_nothing_asked_is_no_stop(tmp_path: Path) -> None:
    stop = StopRequests(tmp_path)
    assert not stop.requested() and stop.reason is None


def test_a_signal_stops_with_its_name_and_the_first_reason_stands(tmp_path: Path) -> None:
    stop = StopRequests(tmp_path)
    stop.on_signal(signal.SIGTERM, None)
    stop.on_signal(signal.SIGINT, None)
    assert stop.requested() and stop.reason == "stopped by SIGTERM"


def test_the_stop_file_stops_with_its_reason_or_on_request(settings: Settings) -> None:
    run_dir = settings.runs_dir / "e1"
    stop = StopRequests(run_dir)
    write_stop_request(settings, "e1")
    assert stop.requested() and stop.reason == "stopped on request"
    pruned = StopRequests(run_dir)
    write_stop_request(settings, "e1", "pruned: worse than the median at step 3")
    assert pruned.requested() and pruned.reason == "pruned: worse than the median at step 3"


def test_the_files_reason_wins_over_the_signal_that_came_with_it(settings: Settings) -> None:
    """`phalanx stop` and a group's pruning leave the file, then send SIGTERM."""
    stop = StopRequests(settings.runs_dir / "e1")
    write_stop_request(settings, "e1", "pruned")
    stop.on_signal(signal.SIGTERM, None)
    assert stop.reason == "pruned"


def test_phalanx_stop_here_gives_the_reason_a_servers_stop_gives(settings: Settings) -> None:
    """`phalanx stop` on this machine leaves the request and signals; a server's stop leaves the
    request alone: one reason either way, not "stopped by SIGTERM" for the one door."""
    here = StopRequests(settings.runs_dir / "e1")
    write_stop_request(settings, "e1")
    here.on_signal(signal.SIGTERM, None)
    served = StopRequests(settings.runs_dir / "e1")
    assert served.requested()
    assert here.reason == served.reason == "stopped on request"


def test_a_stop_while_queued_says_it_never_ran(settings: Settings) -> None:
    by_signal = StopRequests(settings.runs_dir / "e1")
    by_signal.on_signal(signal.SIGTERM, None)
    by_signal.stopped_while_queued()
    assert by_signal.reason == "stopped while queued (by SIGTERM)"
    write_stop_request(settings, "e2")
    by_file = StopRequests(settings.runs_dir / "e2")
    assert by_file.requested()
    by_file.stopped_while_queued()
    assert by_file.reason == "stopped while queued (by a stop request)"
    write_stop_request(settings, "e3", "pruned")
    with_reason = StopRequests(settings.runs_dir / "e3")
    with_reason.stopped_while_queued()
    assert with_reason.reason == "pruned"
