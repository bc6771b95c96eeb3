"""Torch's CPU threads fitted to the cores other processes leave free, measured while loading.

torch runs a pass on as many threads as the machine has cores. When another process keeps
some of them busy, its threads wait for each other at every kernel's barrier while one of them
waits for a core: on this project's 2-core machine under load, a one-token pass of the bundled
target took 0.5-1.2 s of CPU on 2 threads and ~55-70 ms on 1, and building the fast runner's
weights 3 s instead of 0.5 s (``benchmarks/oneoff.py --busy`` measures runs with one core kept
busy). So :func:`Window` notes the machine's busy time and this process's own CPU time when a
load starts; when it ends, the cores the *other* processes kept busy over those seconds give how
many are free, and torch gets no more threads than that (never more than it had before the
first fit). A quiet machine keeps every thread. ``SPECVIZ_THREADS=N`` sets the count instead.
Linux only (elsewhere nothing changes).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

STAT = "/proc/stat"
# A core counts as taken by others when they kept it at least this busy over the window.
TAKEN = 0.5
_CEILING: list[int] = []  # torch's count before the first fit: a quiet machine gets it back


def machine_busy_s(stat_text: str, ticks_per_s: float) -> float | None:
    """Seconds all cores spent busy since boot, from /proc/stat's first line (None if unread)."""
    first = stat_text.split("\n", 1)[0].split()
    if len(first) < 5 or first[0] != "cpu":
        return None
    try:
        values = [int(v) for v in first[1:]]
    except ValueError:
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user and nice)
    busy = sum(values[:8]) - values[3] - (values[4] if len(values) > 4 else 0)
    return busy / ticks_per_s


def fitted_threads(current: int, cores: int, others_busy: float) -> int:
    """Threads for torch: the cores others did not keep busy (one at least, ``current`` at most).

    ``others_busy`` is in cores (1.0: one core busy all the time), over the window."""
    taken = int(others_busy + (1 - TAKEN))  # rounds at TAKEN: 0.5 of a core counts as taken
    return max(1, min(current, cores - taken))


@dataclass
class Window:
    """A measuring window over a load: the machine's busy seconds and this process's own."""

    busy_s: float | None
    own_s: float
    wall_s: float

    @classmethod
    def start(cls) -> Window:
        return cls(_read_busy(), _own_cpu_s(), time.perf_counter())

    def others_busy(self) -> float | None:
        """Cores other processes kept busy since the start, on average (None: unknown)."""
        busy = _read_busy()
        wall = time.perf_counter() - self.wall_s
        if busy is None or self.busy_s is None or wall < 0.5:  # too short to tell
            return None
        return max(0.0, (busy - self.busy_s) - (_own_cpu_s() - self.own_s)) / wall

    def fit(self) -> int:
        """Set torch's thread count for the load's measured window; return it."""
        import torch

        current = torch.get_num_threads()
        if not _CEILING:
            _CEILING.append(current)
        wanted = os.environ.get("SPECVIZ_THREADS", "").strip()
        if wanted.isdigit() and int(wanted) > 0:
            n = int(wanted)
        else:
            others = self.others_busy()
            if others is None:
                return current
            n = fitted_threads(_CEILING[0], _cores(), others)
        if n != current:
            torch.set_num_threads(n)
        return n


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _read_busy() -> float | None:
    try:
        with open(STAT, encoding="ascii") as f:
            text = f.read(4096)
        ticks = float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, AttributeError):
        return None
    return machine_busy_s(text, ticks)


__all__ = ["Window", "fitted_threads", "machine_busy_s"]
