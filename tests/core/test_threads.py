"""core/threads.py: torch's threads fitted to the cores other processes leave free."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from specviz.core.threads import Window, fitted_threads, machine_busy_s


def check_fitting(fit: Callable[[int, int, float], int]) -> None:
    assert fit(2, 2, 0.05) == 2  # a quiet 2-core machine keeps both threads
    assert fit(2, 2, 1.0) == 1  # one core kept busy elsewhere: one thread
    assert fit(2, 2, 0.6) == 1  # more than half a core counts as taken
    assert fit(2, 2, 0.4) == 2
    assert fit(2, 2, 7.5) == 1  # never fewer than one
    assert fit(16, 16, 1.0) == 15
    assert fit(4, 16, 0.0) == 4  # never more than it had (a caller's own setting)


def test_threads_follow_the_cores_others_leave_free() -> None:
    check_fitting(fitted_threads)


def test_the_check_rejects_a_fit_that_ignores_the_load() -> None:
    """Broken: every thread whatever the load (torch's default, 0.5-1.2 s a one-token pass
    on a busy 2-core machine instead of ~60 ms)."""
    with pytest.raises(AssertionError):
        check_fitting(lambda current, cores, busy: current)


def test_busy_seconds_from_proc_stat() -> None:
    #          user nice system idle iowait irq softirq steal guest guest_nice
    text = "cpu  1000 100 300 5000 200 10 20 5 50 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
    assert machine_busy_s(text, 100.0) == pytest.approx((1000 + 100 + 300 + 10 + 20 + 5) / 100)
    assert machine_busy_s("intr 1 2 3\n", 100.0) is None
    assert machine_busy_s("cpu x y z w v\n", 100.0) is None


def test_a_short_or_unread_window_changes_nothing() -> None:
    before = torch.get_num_threads()
    assert Window(None, 0.0, 0.0).fit() == before
    assert Window(0.0, 0.0, float("inf")).others_busy() is None  # under half a second
    assert torch.get_num_threads() == before


def test_the_environment_sets_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    monkeypatch.setenv("SPECVIZ_THREADS", "1")
    try:
        assert Window.start().fit() == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
