"""The checkpoint and lost-work rules (scheduler/checkpoints.py): pure, no database."""

from scheduler.checkpoints import (
    checkpoint_accepted,
    checkpoint_of_attempt,
    lost_gpu_seconds,
    lost_in_window,
    work_since,
)


def test_unsaved_work_begins_at_the_last_checkpoint_of_this_attempt_else_at_its_start():
    assert work_since(100.0, 250.0) == 250.0
    assert work_since(100.0, 50.0) == 100.0  # an earlier attempt's checkpoint
    assert work_since(100.0, None) == 100.0
    assert checkpoint_of_attempt(100.0, 50.0) is None and checkpoint_of_attempt(100.0, 100.0) == 100.0


def test_a_checkpoint_is_never_in_the_future_never_before_the_start_and_monotonic():
    assert checkpoint_accepted(500.0, started=100.0, last=None, now=400.0) == 400.0
    assert checkpoint_accepted(99.0, started=100.0, last=None, now=400.0) is None
    assert checkpoint_accepted(200.0, started=100.0, last=300.0, now=400.0) is None
    assert checkpoint_accepted(300.0, started=100.0, last=300.0, now=400.0) is None
    assert checkpoint_accepted(350.0, started=100.0, last=300.0, now=400.0) == 350.0
    assert checkpoint_accepted(150.0, started=100.0, last=50.0, now=400.0) == 150.0  # last was an earlier attempt's
    assert checkpoint_accepted(150.0, started=None, last=None, now=400.0) is None  # not started
    # saved between its admission and the portal hearing it started: counts as at the start
    assert checkpoint_accepted(95.0, started=100.0, last=None, now=400.0, admitted=90.0) == 100.0
    assert checkpoint_accepted(85.0, started=100.0, last=None, now=400.0, admitted=90.0) is None


def test_lost_work_is_each_share_times_its_time_after_the_checkpoint():
    held = [(1.0, 0.0, 1000.0), (0.5, 0.0, 1000.0), (1.0, 800.0, 900.0)]
    assert lost_gpu_seconds(held, since=600.0) == 400 + 200 + 100
    assert lost_gpu_seconds(held, since=1000.0) == 0


def test_a_window_counts_only_the_lost_work_after_its_start():
    assert lost_in_window(100.0, since=0.0, until=100.0, window_start=50.0) == 50.0
    assert lost_in_window(100.0, since=60.0, until=100.0, window_start=50.0) == 100.0
    assert lost_in_window(100.0, since=0.0, until=40.0, window_start=50.0) == 0.0
