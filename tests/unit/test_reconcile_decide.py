"""The one rule for an experiment's end when its supervisor cannot record it (ends.decide), as a
table, and the one liveness check (procs.judge) on this very process. No process is started."""

from __future__ import annotations

import os

import pytest

from phalanx.domain import ExperimentStatus as S
from phalanx.domain import ReplicaState
from phalanx.ends import ABANDONED, GAVE_UP, Asker, Facts, decide
from phalanx.machine.procs import HOST, Seen, judge, read_record, record_process, start_time

UNFINISHED = [S.BUILDING, S.STARTING, S.RUNNING]


@pytest.mark.parametrize("status", [S.SUCCEEDED, S.FAILED, S.STOPPED])
@pytest.mark.parametrize("asker", list(Asker))
def test_an_ended_experiment_is_never_decided_again(status: S, asker: Asker) -> None:
    assert decide(Facts(status, recorder=Seen.GONE, recorder_pid=7, asker=asker)) is None


@pytest.mark.parametrize("status", UNFINISHED)
@pytest.mark.parametrize("seen", [Seen.RUNS, Seen.ELSEWHERE, None])
def test_a_reader_leaves_an_experiment_whose_recorder_may_run(status: S, seen: Seen | None) -> None:
    assert decide(Facts(status, recorder=seen, recorder_pid=7)) is None
    assert decide(Facts(status, script=True, recorder=seen, recorder_pid=7)) is None


@pytest.mark.parametrize("status", UNFINISHED)
def test_a_killed_supervisor_fails_its_experiment_and_its_unfinished_replicas(status: S) -> None:
    end = decide(Facts(status, recorder=Seen.GONE, recorder_pid=4242))
    assert end is not None
    assert end.status is S.FAILED and end.replica_state is ReplicaState.FAILED
    assert "its supervisor (pid 4242) was killed" in end.reason
    assert end.replica_reason == end.reason


def test_a_killed_script_fails_with_its_crash_line_when_faulthandler_wrote_one() -> None:
    crash = "Fatal Python error: Segfault"
    crashed = decide(Facts(S.RUNNING, script=True, recorder=Seen.GONE, recorder_pid=9, crash=crash))
    assert crashed is not None and crashed.status is S.FAILED
    assert crashed.reason == "the script (pid 9) crashed: Fatal Python error: Segfault"
    killed = decide(Facts(S.RUNNING, script=True, recorder=Seen.GONE, recorder_pid=9))
    assert killed is not None and killed.status is S.FAILED
    assert "SIGKILL" in killed.reason


def test_a_queued_experiment_is_stopped_only_when_its_waiter_is_gone_and_the_queue_forgot_it() -> None:
    end = decide(Facts(S.QUEUED, recorder=Seen.GONE, recorder_pid=3))
    assert end is not None
    assert (end.status, end.reason, end.replica_state) == (S.STOPPED, ABANDONED, ReplicaState.STOPPED)
    assert decide(Facts(S.QUEUED, recorder=Seen.GONE, in_queue=True)) is None
    assert decide(Facts(S.QUEUED, recorder=Seen.RUNS)) is None
    assert decide(Facts(S.QUEUED, recorder=None)) is None  # another machine's run: not ours to judge


@pytest.mark.parametrize("status", [S.CREATED, S.PENDING, S.UNKNOWN])
def test_a_reader_does_not_end_states_no_supervisor_of_this_machine_left(status: S) -> None:
    assert decide(Facts(status, recorder=Seen.GONE, recorder_pid=3)) is None


@pytest.mark.parametrize("status", [*UNFINISHED, S.QUEUED, S.PENDING])
def test_a_stop_always_ends_an_unfinished_experiment_stopped_saying_whether_its_supervisor_was_gone(
    status: S,
) -> None:
    gone = decide(Facts(status, recorder=Seen.RUNS, asker=Asker.STOP))
    assert gone is not None and gone.status is S.STOPPED
    assert gone.reason == "stopped by phalanx stop (its supervisor was gone)"
    script = decide(Facts(status, script=True, asker=Asker.STOP))
    assert script is not None and script.reason == "stopped by phalanx stop (its script was gone)"
    pruned = decide(Facts(status, asker=Asker.STOP, reason="pruned at step 3", supervised_stop=True))
    assert pruned is not None and pruned.reason == "pruned at step 3"
    assert pruned.replica_state is ReplicaState.STOPPED


def test_a_submit_that_gave_up_stops_what_it_started() -> None:
    end = decide(Facts(S.STARTING, asker=Asker.SUBMIT))
    assert end is not None and (end.status, end.reason) == (S.STOPPED, GAVE_UP)


def test_judge_tells_this_process_from_a_reused_pid_another_program_and_another_machine() -> None:
    me, start = os.getpid(), start_time(os.getpid())
    assert start is not None
    assert judge(me, start) is Seen.RUNS
    assert judge(me) is Seen.RUNS
    assert judge(me, start + 1) is Seen.GONE  # the pid now names a process started later
    assert judge(me, start, program=b"no-such-program-\x01") is Seen.GONE
    assert judge(me, start, host=HOST) is Seen.RUNS
    assert judge(me, start, host=HOST + "-elsewhere") is Seen.ELSEWHERE
    assert judge(1, 0) is Seen.GONE  # init is never a recorded process


def test_a_process_record_reads_back_as_written(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "supervisor.pid"
    record_process(path)
    assert read_record(path) == (os.getpid(), start_time(os.getpid()), HOST)
    path.write_text("garbage")
    assert read_record(path) is None
