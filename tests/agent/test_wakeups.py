"""The agent loop's wake-ups: the portal's news and a child's end cut its sleep short."""

import subprocess
import threading
import time

import pytest

from scheduler.agent.wakeups import Wakeups


@pytest.fixture
def wakeups():
    alarm = Wakeups()
    yield alarm
    alarm.close()


def test_news_from_another_thread_wakes_the_sleeper_at_once_and_says_so(wakeups):
    threading.Timer(0.1, wakeups.news).start()
    started = time.monotonic()
    assert wakeups.wait(5) is True
    assert time.monotonic() - started < 1
    assert wakeups.wait(0.05) is False  # taken


def test_a_child_that_ends_wakes_the_sleeper_without_news(wakeups):
    assert wakeups.catch_child_exits()  # pytest runs tests on the main thread
    child = subprocess.Popen(["sleep", "0.2"])
    started = time.monotonic()
    assert wakeups.wait(5) is False
    assert time.monotonic() - started < 1.5
    child.wait()


def test_off_the_main_thread_it_only_sleeps(wakeups):
    answers = []
    thread = threading.Thread(target=lambda: answers.append(wakeups.catch_child_exits()))
    thread.start()
    thread.join()
    assert answers == [False]
    started = time.monotonic()
    assert wakeups.wait(0.2) is False
    assert time.monotonic() - started >= 0.19


def test_news_after_close_is_dropped_quietly(wakeups):
    wakeups.close()
    wakeups.news()  # the long-poll thread may outlive the loop
    wakeups.close()  # twice: nothing (never another file's descriptor)
