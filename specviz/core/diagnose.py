"""Where the draft goes wrong, from the Round events of a run, a lineup or a prompt set.

Only *tested* drafts count (kept or rejected): a draft after a rejection is discarded
without ever being compared with p, so it says nothing about the draft.

- the drafted tokens rejected most: how often, mean p(x) and mean q(x) at those rejections,
  and the (run, round) of each, so a view can jump to them;
- acceptance against the draft's confidence q(x), in bins (a calibration plot: with
  exact sampling P(kept | q) = E[min(1, p/q)], so a draft sure of tokens the target doubts
  sits below the diagonal);
- acceptance by position given the position was reached, and by drafter.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .events import Event, Round, RunStarted


@dataclass(frozen=True)
class TestedDraft:
    """One tested draft, where it was."""

    run: int  # 0-based run of the recording
    round: int  # Round.index within that run
    index: int  # position in the round
    token_id: int
    text: str
    p: float
    q: float
    kept: bool
    drafter: str


def tested_drafts(events: Iterable[Event]) -> list[TestedDraft]:
    """Every kept or rejected draft of every run, in order (discarded ones left out)."""
    out: list[TestedDraft] = []
    run = -1
    for event in events:
        if isinstance(event, RunStarted):
            run += 1
        elif isinstance(event, Round):
            for d in event.drafted:
                if d.status == "discarded":
                    continue
                out.append(TestedDraft(max(run, 0), event.index, d.index, d.token_id, d.text,
                                       d.p, d.q, d.status == "accepted", d.drafter))
    return out


@dataclass(frozen=True)
class TokenRow:
    """A drafted token and how it fared."""

    token_id: int
    text: str
    rejected: int
    tested: int
    mean_p: float  # over its rejections: p(x)
    mean_q: float  # over its rejections: q(x)
    rounds: tuple[tuple[int, int], ...]  # (run, round) of each rejection

    @property
    def acceptance(self) -> float:
        return 1.0 - self.rejected / self.tested if self.tested else 0.0


def rejected_tokens(drafts: Sequence[TestedDraft], top: int = 20) -> list[TokenRow]:
    """The ``top`` tokens rejected most often (ties: more tested first, then by text)."""
    tested: dict[int, int] = {}
    rejected: dict[int, list[TestedDraft]] = {}
    text: dict[int, str] = {}
    for d in drafts:
        tested[d.token_id] = tested.get(d.token_id, 0) + 1
        text.setdefault(d.token_id, d.text)
        if not d.kept:
            rejected.setdefault(d.token_id, []).append(d)
    rows = [TokenRow(tid, text[tid], len(rs), tested[tid], sum(d.p for d in rs) / len(rs),
                     sum(d.q for d in rs) / len(rs), tuple((d.run, d.round) for d in rs))
            for tid, rs in rejected.items()]
    rows.sort(key=lambda r: (-r.rejected, -r.tested, r.text))
    return rows[:top]


@dataclass(frozen=True)
class Bin:
    """Drafts whose q(x) fell in [low, high)."""

    low: float
    high: float
    tested: int
    kept: int
    mean_q: float

    @property
    def acceptance(self) -> float:
        return self.kept / self.tested if self.tested else 0.0


def calibration(drafts: Sequence[TestedDraft], bins: int = 10) -> list[Bin]:
    """Acceptance against the draft's confidence q(x), in ``bins`` equal bins over [0, 1]."""
    counts = [[0, 0, 0.0] for _ in range(bins)]
    for d in drafts:
        b = min(bins - 1, max(0, int(d.q * bins)))  # q = 1 (lookup, greedy) in the last bin
        counts[b][0] += 1
        counts[b][1] += d.kept
        counts[b][2] += d.q
    return [Bin(i / bins, (i + 1) / bins, int(n), int(k), s / n if n else 0.0)
            for i, (n, k, s) in enumerate(counts)]


def by_position(drafts: Sequence[TestedDraft]) -> list[tuple[int, int]]:
    """(reached, kept) per draft position: P(kept | reached) is their ratio."""
    size = max((d.index for d in drafts), default=-1) + 1
    reached, kept = [0] * size, [0] * size
    for d in drafts:
        reached[d.index] += 1
        kept[d.index] += d.kept
    return list(zip(reached, kept, strict=True))


def by_drafter(drafts: Sequence[TestedDraft]) -> dict[str, tuple[int, int]]:
    """(tested, kept) per drafter ("model", "lookup")."""
    out: dict[str, tuple[int, int]] = {}
    for d in drafts:
        n, k = out.get(d.drafter, (0, 0))
        out[d.drafter] = (n + 1, k + d.kept)
    return out


@dataclass(frozen=True)
class Diagnosis:
    tokens: tuple[TokenRow, ...]
    calibration: tuple[Bin, ...]
    positions: tuple[tuple[int, int], ...]
    drafters: tuple[tuple[str, int, int], ...]
    tested: int


def diagnose(events: Iterable[Event], top: int = 20, bins: int = 10) -> Diagnosis:
    drafts = tested_drafts(events)
    return Diagnosis(tuple(rejected_tokens(drafts, top)), tuple(calibration(drafts, bins)),
                     tuple(by_position(drafts)),
                     tuple((name, n, k) for name, (n, k) in sorted(by_drafter(drafts).items())),
                     len(drafts))


def to_markdown(d: Diagnosis) -> str:
    """The diagnosis as Markdown tables."""
    def rate(k: int, n: int) -> str:
        return f"{k / n:.2f}" if n else "-"

    lines = [f"Tested drafts: {d.tested}", "", "| token | rejected | tested | mean p(x) | "
             "mean q(x) | rounds (run:round) |", "|---|---:|---:|---:|---:|---|"]
    for t in d.tokens:
        shown = t.text.replace("|", "\\|").replace("\n", "↵") or "∅"
        where = " ".join(f"{r}:{n}" for r, n in t.rounds[:8]) + (" …" if len(t.rounds) > 8 else "")
        lines.append(f"| `{shown}` | {t.rejected} | {t.tested} | {t.mean_p:.3f} | "
                     f"{t.mean_q:.3f} | {where} |")
    lines += ["", "| q(x) | tested | kept | acceptance | mean q |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {b.low:.1f}–{b.high:.1f} | {b.tested} | {b.kept} | "
              f"{rate(b.kept, b.tested)} | {b.mean_q:.2f} |" for b in d.calibration if b.tested]
    lines += ["", "| position | reached | kept | P(kept \\| reached) |", "|---:|---:|---:|---:|"]
    lines += [f"| {i + 1} | {n} | {k} | {rate(k, n)} |" for i, (n, k) in enumerate(d.positions)]
    lines += ["", "| drafter | tested | kept | α |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {n} | {k} | {rate(k, n)} |" for name, n, k in d.drafters]
    return "\n".join(lines) + "\n"


__all__ = ["Bin", "Diagnosis", "TestedDraft", "TokenRow", "by_drafter", "by_position",
           "calibration", "diagnose", "rejected_tokens", "tested_drafts", "to_markdown"]
