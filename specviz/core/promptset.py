"""Prompt sets: a file of prompts run beside the target alone, summed up by category.

Two formats, told apart by their first non-blank character:

- plain text: one prompt per line (blank lines and lines starting with ``#`` skipped), one
  category named after the file;
- JSON lines in Spec-Bench's form: ``{"question_id": 81, "category": "writing", "turns":
  ["…", "…"]}`` per line; the first turn is the prompt. (Spec-Bench itself is read from the
  path a user gives; specviz ships no copy.)

Per prompt, the target alone and each configuration run one after the other, in an order
rotated per prompt, with the same seed. The table has, per category and configuration:
α, tokens per round, the speedup over the target alone (geometric mean and the worst prompt),
the share of wall time outside the forward passes, and at T = 0 how many prompts gave the
target alone's ids. A prompt whose run fails (longer than the context, say) is skipped with
its one-line reason and the set goes on; the summary counts it (:func:`skipped_line`).

Each prompt's outcome can be saved as it finishes, one JSON line per prompt under a header
line naming the configurations (:func:`header_line`, :func:`outcome_line`); a stopped set
resumes from that file (:func:`read_outcomes`, then ``run_prompt_set(done=…)``), running only
the prompts it lacks.
"""

from __future__ import annotations

import csv
import io
import json
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .events import Settings
from .speed import speedup_vs_run
from .sweep import Measured, geomean, measure

BASELINE_LABEL = "target alone"
MAX_PROMPTS = 100_000


class PromptSetError(ValueError):
    """A prompt file that cannot be read: one message naming the line."""


@dataclass(frozen=True)
class PromptItem:
    id: str
    category: str
    text: str


def parse_prompts(text: str, name: str = "prompts") -> list[PromptItem]:
    """The prompts of a file's text (``name`` is the category of a plain-text file)."""
    lines = text.splitlines()
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    items: list[PromptItem] = []
    if first.startswith("{"):
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            items.append(_jsonl_item(line, n))
    else:
        for n, line in enumerate(lines, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                items.append(PromptItem(str(n), name, line.strip()))
    if not items:
        raise PromptSetError("no prompts in the file (one per line, or Spec-Bench JSON lines)")
    if len(items) > MAX_PROMPTS:
        raise PromptSetError(f"{len(items)} prompts: more than {MAX_PROMPTS}, not a prompt set")
    return items


def _jsonl_item(line: str, n: int) -> PromptItem:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise PromptSetError(f"line {n}: not a JSON object ({exc})") from None
    if not isinstance(data, dict):
        raise PromptSetError(f"line {n}: not a JSON object")
    turns = data.get("turns")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
        raise PromptSetError(f'line {n}: "turns" must be a list whose first item is the prompt')
    category = data.get("category", "all")
    qid = data.get("question_id", n)
    if not isinstance(category, str) or not category:
        raise PromptSetError(f'line {n}: "category" must be a non-empty string')
    return PromptItem(str(qid), category, turns[0])


def read_prompts(path: str | Path) -> list[PromptItem]:
    """The prompts of the file at ``path`` (PromptSetError says what is wrong)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptSetError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PromptSetError(f"{path} is not UTF-8 text") from None
    return parse_prompts(text, p.stem)


def pick(items: Sequence[PromptItem], per_category: int | None = None,
         categories: Sequence[str] | None = None) -> list[PromptItem]:
    """The first ``per_category`` prompts of each (chosen) category, in file order."""
    wanted = set(categories) if categories else None
    if wanted is not None:
        unknown = wanted - {i.category for i in items}
        if unknown:
            known = ", ".join(sorted({i.category for i in items}))
            raise PromptSetError(f"no category {', '.join(sorted(unknown))} in the file "
                                 f"(it has: {known})")
    seen: dict[str, int] = {}
    out = []
    for item in items:
        if wanted is not None and item.category not in wanted:
            continue
        seen[item.category] = seen.get(item.category, 0) + 1
        if per_category is None or seen[item.category] <= per_category:
            out.append(item)
    return out


@dataclass(frozen=True)
class PromptResult:
    """One configuration on one prompt, beside the target alone on it."""

    item: PromptItem
    config: str
    run: Measured
    speedup: float  # tokens/s ÷ the target alone's on this prompt
    identical: bool | None  # T = 0: the target alone's ids (None at T > 0, or for it)


def compare(item: PromptItem, config: str, run: Measured, base: Measured,
            greedy: bool) -> PromptResult:
    """A run set beside the target alone on the same prompt."""
    same = None
    if greedy and config != BASELINE_LABEL:
        n = min(len(run.generated_ids), len(base.generated_ids))  # EOS may end one earlier
        same = run.generated_ids[:n] == base.generated_ids[:n]
    return PromptResult(item, config, run, speedup_vs_run(run.tokens_per_s, base.tokens_per_s),
                        same)


@dataclass(frozen=True)
class PromptOutcome:
    """One prompt of a set: its results (the target alone first, then each configuration), or
    none and why it was skipped (one line: a run of it failed)."""

    item: PromptItem
    results: tuple[PromptResult, ...] = ()
    skipped: str | None = None


def run_prompt_set(pair: Any, items: Sequence[PromptItem],
                   configs: Sequence[tuple[str, Settings]], chat: bool = True,
                   stop: threading.Event | None = None,
                   done: Collection[PromptItem] = ()) -> Iterator[PromptOutcome]:
    """Per prompt: the target alone and every configuration (same seed, rotated order); its
    outcome once all of them finished. A run that fails skips its prompt (the reason kept) and
    the set goes on. A stop ends it after the run in flight. Prompts in ``done`` (a resumed
    set's) are passed over; the others keep the order they would have had."""
    from .engine import AutoregressiveDecoder, SpeculativeDecoder, chat_prompt, guarded
    from .errors import one_line

    for i, item in enumerate(items):
        if item in done:
            continue
        prompt = chat_prompt(pair.tokenizer, item.text) if chat else item.text
        jobs: list[tuple[str, Settings]] = [(BASELINE_LABEL, configs[0][1]), *configs]
        shift = i % len(jobs)
        runs: dict[str, Measured] = {}
        skipped = None
        for label, settings in jobs[shift:] + jobs[:shift]:
            if stop is not None and stop.is_set():
                return
            decoder = (AutoregressiveDecoder(pair, settings) if label == BASELINE_LABEL
                       else SpeculativeDecoder(pair, settings))
            events = list(guarded(decoder.run(prompt, stop)))
            if stop is not None and stop.is_set():
                return
            try:
                runs[label] = measure(events)  # ValueError with the run's message if it failed
            except ValueError as exc:
                skipped = one_line(str(exc), 200)
                break  # the prompt's other runs would have nothing to stand beside
        if skipped is not None:
            yield PromptOutcome(item, skipped=skipped)
            continue
        base = runs[BASELINE_LABEL]
        yield PromptOutcome(item, tuple(compare(item, label, runs[label], base,
                                                settings.temperature == 0)
                                        for label, settings in jobs))


def skipped_line(outcomes: Sequence[PromptOutcome]) -> str:
    """``"skipped 1: prompt 242: The prompt is …"`` ("" when none was skipped)."""
    skipped = [o for o in outcomes if o.skipped is not None]
    if not skipped:
        return ""
    return f"skipped {len(skipped)}: " + "; ".join(f"prompt {o.item.id}: {o.skipped}"
                                                    for o in skipped)


def results_of(outcomes: Sequence[PromptOutcome]) -> list[PromptResult]:
    """Every result of the prompts not skipped, in order (what :func:`table` sums)."""
    return [r for o in outcomes for r in o.results]


FORMAT = "specviz prompt set"


def _configs_json(configs: Sequence[tuple[str, Settings]]) -> list[dict[str, Any]]:
    return [{"label": label, "settings": asdict(s)} for label, s in configs]


def header_line(configs: Sequence[tuple[str, Settings]]) -> str:
    """The first line of a results file: what every prompt ran."""
    return json.dumps({"format": FORMAT, "configs": _configs_json(configs)}, ensure_ascii=False)


def outcome_line(o: PromptOutcome) -> str:
    """One prompt's outcome as a JSON line (its runs' figures, or why it was skipped)."""
    return json.dumps({"id": o.item.id, "category": o.item.category, "text": o.item.text,
                       "skipped": o.skipped,
                       "results": [{"config": r.config, "speedup": r.speedup,
                                    "identical": r.identical, "run": asdict(r.run)}
                                   for r in o.results]}, ensure_ascii=False)


def read_outcomes(text: str, configs: Sequence[tuple[str, Settings]]) -> list[PromptOutcome]:
    """The outcomes a results file holds; PromptSetError if it is not one, or was written for
    other configurations. A last line cut short (the run killed while writing it) is dropped."""
    lines = text.splitlines()
    if not text.endswith("\n") and lines:
        try:
            json.loads(lines[-1])
        except ValueError:
            lines.pop()  # written in part: that prompt runs again
    try:
        head = json.loads(lines[0]) if lines else None
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise PromptSetError("not a prompt-set results file written by specviz (its first line "
                             "names the configurations)")
    wanted = json.loads(json.dumps(_configs_json(configs)))
    if head.get("configs") != wanted:
        had = ", ".join(str(c.get("label")) for c in head.get("configs") or []
                        if isinstance(c, dict))
        raise PromptSetError(f"written for other configurations or settings ({had}): resume "
                             "with the same ones, or start a new file")
    out = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            item = PromptItem(str(d["id"]), str(d["category"]), str(d["text"]))
            results = tuple(PromptResult(item, str(r["config"]), _measured(r["run"]),
                                         float(r["speedup"]), r["identical"])
                            for r in d["results"])
            skipped = d["skipped"]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PromptSetError(f"line {n}: not a prompt's outcome ({type(exc).__name__}: "
                                 f"{exc})") from None
        out.append(PromptOutcome(item, results, None if skipped is None else str(skipped)))
    return out


def _measured(fields: dict[str, Any]) -> Measured:
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                              for k, v in fields.items()}
    return Measured(**values)


def in_order(items: Sequence[PromptItem], outcomes: Sequence[PromptOutcome]
             ) -> list[PromptOutcome]:
    """The outcomes of ``items``, in their order (a resumed set's earlier ones and its new
    ones together; outcomes of prompts not in ``items`` left out)."""
    by_item = {o.item: o for o in outcomes}
    return [by_item[i] for i in items if i in by_item]


@dataclass(frozen=True)
class CategoryRow:
    category: str
    config: str
    prompts: int
    alpha: float | None  # None where nothing was drafted (the target alone, transformers)
    tokens_per_round: float | None
    speedup: float  # geometric mean over prompts
    worst: float
    worst_prompt: str
    overhead: float | None  # share of wall time outside forward passes (None: not measured)
    identical: tuple[int, int] | None  # (same, compared) at T = 0


ALL = "all"


def table(results: Sequence[PromptResult]) -> list[CategoryRow]:
    """Rows per category (in first-seen order, then "all") × configuration."""
    categories: list[str] = []
    configs: list[str] = []
    for r in results:
        if r.item.category not in categories:
            categories.append(r.item.category)
        if r.config not in configs:
            configs.append(r.config)
    rows = []
    for cat in [*categories, ALL] if len(categories) > 1 else categories:
        for config in configs:
            rs = [r for r in results if r.config == config and cat in (ALL, r.item.category)]
            if rs:
                rows.append(_row(cat, config, rs))
    return rows


def _row(category: str, config: str, rs: Sequence[PromptResult]) -> CategoryRow:
    tested = sum(r.run.tested for r in rs)
    rounds = sum(r.run.rounds for r in rs)
    drafted = sum(r.run.drafted for r in rs)
    wall = sum(r.run.wall_s for r in rs)
    forward = sum(r.run.forward_s for r in rs)
    ratios = [r.speedup for r in rs if r.speedup > 0]
    worst = min(rs, key=lambda r: r.speedup)
    checked = [r.identical for r in rs if r.identical is not None]
    return CategoryRow(
        category=category, config=config, prompts=len(rs),
        alpha=sum(r.run.accepted for r in rs) / tested if tested else None,
        tokens_per_round=sum(r.run.tokens for r in rs) / rounds if rounds and drafted else None,
        speedup=geomean(ratios), worst=worst.speedup, worst_prompt=worst.item.id,
        overhead=max(0.0, 1.0 - forward / wall) if forward > 0 and wall > 0 else None,
        identical=(sum(checked), len(checked)) if checked else None)


HEADER = ("category", "configuration", "prompts", "α", "tokens/round", "speedup (geomean)",
          "worst (prompt)", "outside forward", "identical at T=0")


def cells(r: CategoryRow) -> list[str]:
    return [r.category, r.config, str(r.prompts),
            "-" if r.alpha is None else f"{r.alpha:.2f}",
            "-" if r.tokens_per_round is None else f"{r.tokens_per_round:.2f}",
            f"{r.speedup:.2f}x", f"{r.worst:.2f}x ({r.worst_prompt})",
            "-" if r.overhead is None else f"{100 * r.overhead:.1f}%",
            "-" if r.identical is None else f"{r.identical[0]}/{r.identical[1]}"]


def to_markdown(rows: Sequence[CategoryRow], skipped: str = "") -> str:
    """The table; ``skipped`` (:func:`skipped_line`) as a line under it."""
    lines = ["| " + " | ".join(HEADER) + " |",
             "|" + "|".join(["---", "---", "---:", "---:", "---:", "---:", "---:", "---:",
                             "---:"]) + "|"]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n" + (f"\n{skipped}\n" if skipped else "")


def to_csv(rows: Sequence[CategoryRow]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["category", "configuration", "prompts", "alpha", "tokens_per_round",
                "speedup_geomean", "worst", "worst_prompt", "outside_forward",
                "identical", "compared"])
    for r in rows:
        w.writerow([r.category, r.config, r.prompts,
                    "" if r.alpha is None else round(r.alpha, 4),
                    "" if r.tokens_per_round is None else round(r.tokens_per_round, 4),
                    round(r.speedup, 4), round(r.worst, 4), r.worst_prompt,
                    "" if r.overhead is None else round(r.overhead, 4),
                    "" if r.identical is None else r.identical[0],
                    "" if r.identical is None else r.identical[1]])
    return out.getvalue()


def to_text(rows: Sequence[CategoryRow]) -> str:
    """A fixed-width table for a terminal."""
    grid = [list(HEADER)] + [cells(r) for r in rows]
    widths = [max(len(c[i]) for c in grid) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True)))
                     for row in grid) + "\n"


__all__ = ["ALL", "BASELINE_LABEL", "CategoryRow", "PromptItem", "PromptOutcome", "PromptResult",
           "PromptSetError", "cells", "compare", "header_line", "in_order", "outcome_line",
           "parse_prompts", "pick", "read_outcomes", "read_prompts", "results_of",
           "run_prompt_set", "skipped_line", "table", "to_csv", "to_markdown", "to_text"]
