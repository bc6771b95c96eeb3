"""A sweep: speedup and α against K (or drafter, temperature …), measured beside the theory.

Every point is a configuration (its Settings); each runs on every prompt, ``repeats`` times,
beside the target alone on the same prompt and seed, in an order rotated per (repeat,
prompt) so that a drifting machine load hits every point alike. Runs one after the other,
never together (they would share the cores). With ``settle``, a point whose speedup has
already varied little over its repeats on every prompt is not repeated again; the rest go on
as before. One untimed warm-up per sweep (:func:`warm_up_sweep`), none per point.

Measured, per point: α = Σkept ÷ Σtested, tokens per round, and the speedup = the geometric
mean over (prompt, repeat) of its tokens/s ÷ the target alone's tokens/s on that prompt and
repeat.

Predicted, per point, in the units of :mod:`specviz.core.speed` (one *step* = one target pass
on one token, measured here on the target-alone runs):
``speed.expected_speedup(α, K, c, v(K))`` = E[tokens per round] ÷ (K·c + v(K)), with α and
c pooled over every point that differs from this one in K alone (the theory's α does not
depend on K), c = draft seconds per drafted token ÷ step, and v(K) = seconds of this point's
verify passes ÷ step. The first round of each run (it also feeds the prompt) is left out of
c, v and the step. The gap measured ÷ predicted − 1 is reported, not hidden: the prediction
leaves out the engine's own time between passes and the prompt pass.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
from collections.abc import Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .events import Event, Round, RunFailed, RunFinished, RunStarted, Settings
from .speed import expected_speedup, pass_costs, speedup_vs_run

if TYPE_CHECKING:
    from .parts import Factory

BASELINE = -1  # the point index of the target alone


@dataclass(frozen=True)
class Measured:
    """One run's figures, from its events (what a sweep or a prompt set keeps of it)."""

    tokens: int
    wall_s: float
    rounds: int
    drafted: int
    tested: int
    accepted: int
    forward_s: float  # inside model forward passes
    # After the first round (which also feeds the prompt): the parts of the cost model.
    draft_s: float = 0.0
    draft_tokens: int = 0
    verify_s: float = 0.0
    verify_passes: int = 0
    generated_ids: tuple[int, ...] = ()
    temperature: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def overhead_share(self) -> float:
        """Share of wall time outside model forward passes."""
        return max(0.0, 1.0 - self.forward_s / self.wall_s) if self.wall_s > 0 else 0.0


def measure(events: Sequence[Event]) -> Measured:
    """The figures of one finished run (its RunStarted … RunFinished)."""
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    finished = next((e for e in events if isinstance(e, RunFinished)), None)
    if finished is None:
        failed = next((e for e in events if isinstance(e, RunFailed)), None)
        raise ValueError(failed.message if failed is not None else "the run did not finish")
    rounds = [e for e in events if isinstance(e, Round)]
    later = rounds[1:]
    s = finished.summary
    return Measured(
        tokens=s.tokens, wall_s=s.wall_time_s, rounds=s.rounds, drafted=s.drafted,
        tested=s.tested, accepted=s.accepted, forward_s=s.forward_time_s,
        draft_s=sum(r.draft_time_s for r in later), draft_tokens=sum(r.k for r in later),
        verify_s=sum(r.verify_time_s for r in later), verify_passes=len(later),
        generated_ids=finished.generated_ids,
        temperature=started.settings.temperature if started is not None else 0.0)


@dataclass(frozen=True)
class Point:
    """One configuration of a sweep."""

    label: str
    settings: Settings


def k_points(base: Settings, ks: Sequence[int]) -> list[Point]:
    """The usual sweep: fixed K over ``ks``, everything else as in ``base``."""
    return [Point(f"K {k}", replace(base, k=k, k_policy="fixed")) for k in ks]


@dataclass(frozen=True)
class Sample:
    """One run of a sweep: which point (BASELINE for the target alone), prompt and repeat."""

    point: int
    prompt: int
    repeat: int
    run: Measured

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.point, self.prompt, self.repeat)


def schedule(n_points: int, n_prompts: int, repeats: int) -> list[tuple[int, int, int]]:
    """(point, prompt, repeat) in run order: per repeat and prompt, the target alone and every
    point, rotated by one each time, so no point always runs first (or right after another)."""
    order: list[tuple[int, int, int]] = []
    jobs = [BASELINE, *range(n_points)]
    for rep in range(repeats):
        for prompt in range(n_prompts):
            shift = (rep * n_prompts + prompt) % len(jobs)
            order += [(j, prompt, rep) for j in jobs[shift:] + jobs[:shift]]
    return order


WARM_TOKENS = 4  # new tokens of each warm-up run
MIN_REPEATS = 2  # a point's spread needs this many repeats on every prompt


def warm_up_sweep(pair: Any, points: Sequence[Point], prompt: str,
                  stop: threading.Event | None = None, factory: Factory | None = None) -> None:
    """Untimed, before a sweep's first run: first forwards allocate, the cost policy calibrates.

    One short run of the target alone and one of the largest K of each group of points that
    differ in K alone (they share their drafter and its passes), not one per point: each short
    run costs a prompt pass of both models, and the engine runs every pass width a run may take
    once per process before the first run's clock anyway (engine.warm_widths, here up to the
    sweep's widest pass: :func:`sweep_factory`).
    """
    from .engine import AutoregressiveDecoder, SpeculativeDecoder, calibrate, guarded

    factory = sweep_factory(points, factory)  # idempotent: a cap of the cap is the cap
    widest: dict[tuple[Any, ...], Settings] = {}
    for point in points:
        group = _group(point.settings)
        if group not in widest or point.settings.k > widest[group].k:
            widest[group] = point.settings
    runs: list[tuple[Any, Settings]] = [(AutoregressiveDecoder, points[0].settings)]
    runs += [(SpeculativeDecoder, s) for s in widest.values()]
    for decoder, s in runs:
        short = replace(s, max_new_tokens=min(WARM_TOKENS, s.max_new_tokens))
        for _ in guarded(decoder(pair, short, factory=factory).run(prompt, stop)):
            pass
    if any(p.settings.k_policy == "cost" for p in points):
        calibrate(pair)  # the cost policy's v(n), once per pair: outside every run's clock


def widest_pass(s: Settings) -> int:
    """The widest pass a point's runs take after the prompt (target and draft): 1 + K at a
    fixed K of the draft model; another drafter or policy may draft up to K_LIMIT."""
    from .options import K_LIMIT

    return 1 + s.k if s.k_policy == "fixed" and s.drafter == "model" else 1 + K_LIMIT


def sweep_factory(points: Sequence[Point], factory: Factory | None = None) -> Factory:
    """``factory`` (the real parts by default) whose warm-up of pass widths before a run's
    clock (engine.warm_widths: every width up to 1 + K_LIMIT) stops at the widest pass of any
    point: a K 1-8 sweep needs 9 of the 17 widths (each run once per warmed model)."""
    from .engine import warm_widths
    from .parts import Factory

    base = factory or Factory()
    inner = base.warm or warm_widths
    need = max((widest_pass(p.settings) for p in points), default=1)

    def warm(pair: Any, widest: int, draft: bool) -> None:
        inner(pair, min(widest, need), draft)

    return replace(base, warm=warm)


def spread(samples: Sequence[Sample], point: int, before: int, n_prompts: int) -> float | None:
    """How far the point's speedup has varied over the repeats before ``before``: the largest,
    over prompts, of max ÷ min − 1 of its speedups on that prompt (each over the target alone
    of its own prompt and repeat). None until every prompt has MIN_REPEATS of them."""
    base = {(s.prompt, s.repeat): s.run.tokens_per_s for s in samples
            if s.point == BASELINE and s.repeat < before}
    ratios: dict[int, list[float]] = {p: [] for p in range(n_prompts)}
    for s in samples:
        if s.point == point and s.repeat < before and s.prompt in ratios \
                and (s.prompt, s.repeat) in base:
            ratio = speedup_vs_run(s.run.tokens_per_s, base[(s.prompt, s.repeat)])
            if ratio > 0:
                ratios[s.prompt].append(ratio)
    if not ratios or any(len(r) < MIN_REPEATS for r in ratios.values()):
        return None
    return max(max(r) / min(r) - 1.0 for r in ratios.values())


def settled(n_points: int, samples: Sequence[Sample], repeat: int, settle: float | None,
            n_prompts: int) -> frozenset[int]:
    """The points that skip ``repeat`` and every later one: those whose :func:`spread` over the
    repeats before it is at most ``settle`` (None: every point runs every repeat)."""
    if settle is None:
        return frozenset()
    out = set()
    for i in range(n_points):
        sp = spread(samples, i, repeat, n_prompts)
        if sp is not None and sp <= settle:
            out.add(i)
    return frozenset(out)


def planned_runs(n_points: int, samples: Sequence[Sample], repeats: int, n_prompts: int,
                 settle: float | None = None) -> int:
    """Runs the sweep takes: each repeat runs its unsettled points on every prompt, and the
    target alone beside them (not at all once every point has settled)."""
    total = 0
    for rep in range(repeats):
        left = n_points - len(settled(n_points, samples, rep, settle, n_prompts))
        total += n_prompts * (left + 1) if left else 0
    return total


def run_sweep(pair: Any, points: Sequence[Point], prompts: Sequence[str], repeats: int = 1,
              stop: threading.Event | None = None, done: Collection[tuple[int, int, int]] = (),
              warm_up: bool = True, *, settle: float | None = None,
              earlier: Sequence[Sample] = (), factory: Factory | None = None
              ) -> Iterator[Sample]:
    """Run the schedule, yielding each sample as it finishes; ``done`` keys are skipped (a
    resumed sweep, whose samples ``earlier`` holds). A stop ends it after the run in flight
    (that run is not yielded); a run that fails raises ValueError with its message.

    With ``settle`` (a fraction, e.g. 0.05), a point stops repeating once its speedup has
    varied by at most that much on every prompt over its repeats so far (:func:`settled`,
    decided at the start of each repeat; MIN_REPEATS at least); the others go on interleaved,
    beside the target alone."""
    from .engine import AutoregressiveDecoder, SpeculativeDecoder, guarded

    factory = sweep_factory(points, factory)
    if warm_up and prompts:
        warm_up_sweep(pair, points, prompts[0], stop, factory)
    measured = list(earlier)
    skip: frozenset[int] = frozenset()
    current = -1
    for key in schedule(len(points), len(prompts), repeats):
        if stop is not None and stop.is_set():
            return
        j, p, rep = key
        if rep != current:
            current, skip = rep, settled(len(points), measured, rep, settle, len(prompts))
        if key in done or j in skip or (j == BASELINE and len(skip) == len(points)):
            continue
        settings = replace(points[0 if j == BASELINE else j].settings, seed=rep)
        decoder = (AutoregressiveDecoder(pair, settings, factory=factory) if j == BASELINE
                   else SpeculativeDecoder(pair, settings, factory=factory))
        events = list(guarded(decoder.run(prompts[p], stop)))
        if stop is not None and stop.is_set():
            return  # a run cut short measures nothing
        sample = Sample(j, p, rep, measure(events))
        measured.append(sample)
        yield sample


@dataclass(frozen=True)
class SweepRow:
    """One point: measured figures and the prediction beside them."""

    label: str
    k: int  # the K of the prediction (the mean drafted per round under an adaptive policy)
    runs: int
    alpha: float
    tokens_per_round: float
    speedup: float  # geometric mean over (prompt, repeat); 0 where no pair was measured
    worst: float
    c: float
    v: float
    predicted: float
    identical: int | None  # T = 0: runs with the target alone's ids (None at T > 0)

    @property
    def gap(self) -> float:
        """measured ÷ predicted − 1 (0 where nothing was predicted)."""
        return self.speedup / self.predicted - 1.0 if self.predicted > 0 else 0.0


@dataclass(frozen=True)
class SweepResult:
    rows: tuple[SweepRow, ...]
    step_s: float  # the target's one-token pass, from the target-alone runs
    baseline_tokens_per_s: float
    samples: int
    planned: int
    best: int | None  # index of the fastest measured row
    best_predicted: int | None
    samples_list: tuple[Sample, ...] = field(default=(), repr=False)

    @property
    def complete(self) -> bool:
        return self.samples == self.planned


def _group(s: Settings) -> tuple[Any, ...]:
    """What a point is apart from its K: points equal here share α and c."""
    return tuple(v for k, v in sorted(asdict(s).items()) if k not in ("k", "seed"))


def geomean(xs: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else 0.0


def summarize(points: Sequence[Point], samples: Sequence[Sample], repeats: int = 1,
              n_prompts: int | None = None, settle: float | None = None) -> SweepResult:
    """The figures of the samples so far (a partial sweep summarises what it has); ``settle``
    as given to :func:`run_sweep` (the runs planned leave out the settled points')."""
    base = {(s.prompt, s.repeat): s.run for s in samples if s.point == BASELINE}
    base_passes = sum(r.verify_passes for r in base.values())
    step = sum(r.verify_s for r in base.values()) / base_passes if base_passes else 0.0
    base_tps = geomean([r.tokens_per_s for r in base.values() if r.tokens_per_s > 0])
    by_point: dict[int, list[Sample]] = {i: [] for i in range(len(points))}
    for s in samples:
        if s.point != BASELINE:
            by_point[s.point].append(s)
    groups: dict[tuple[Any, ...], list[Measured]] = {}
    for i, point in enumerate(points):
        groups.setdefault(_group(point.settings), []).extend(s.run for s in by_point[i])
    rows: list[SweepRow] = []
    for i, point in enumerate(points):
        runs = [s.run for s in by_point[i]]
        pool = groups[_group(point.settings)]
        tested = sum(r.tested for r in pool)
        alpha = sum(r.accepted for r in pool) / tested if tested else 0.0
        # c pooled over every K (one draft pass costs the same whatever K), v(K) this K's own.
        c, _ = pass_costs(sum(r.draft_s for r in pool), sum(r.draft_tokens for r in pool),
                          0.0, 0, step)
        _, v = pass_costs(0.0, 0, sum(r.verify_s for r in runs),
                          sum(r.verify_passes for r in runs), step)
        if step <= 0:
            c = v = 0.0  # no target-alone step to put them in: no prediction
        rounds = sum(r.rounds for r in runs)
        fixed = point.settings.k_policy == "fixed" and point.settings.drafter == "model"
        k = point.settings.k if fixed else round(sum(r.drafted for r in runs) / rounds
                                                 if rounds else 0)
        ratios = [speedup_vs_run(s.run.tokens_per_s, base[(s.prompt, s.repeat)].tokens_per_s)
                  for s in by_point[i] if (s.prompt, s.repeat) in base]
        ratios = [r for r in ratios if r > 0]
        point_tested = sum(r.tested for r in runs)
        greedy = point.settings.temperature == 0
        same = sum(1 for s in by_point[i] if (s.prompt, s.repeat) in base
                   and s.run.generated_ids == base[(s.prompt, s.repeat)].generated_ids)
        rows.append(SweepRow(
            label=point.label, k=k, runs=len(runs),
            alpha=sum(r.accepted for r in runs) / point_tested if point_tested else 0.0,
            tokens_per_round=sum(r.tokens for r in runs) / rounds if rounds else 0.0,
            speedup=geomean(ratios), worst=min(ratios, default=0.0), c=c, v=v,
            predicted=expected_speedup(alpha, k, c, v) if v > 0 else 0.0,
            identical=same if greedy else None))
    measured = [i for i, r in enumerate(rows) if r.speedup > 0]
    predicted = [i for i, r in enumerate(rows) if r.predicted > 0]
    planned = planned_runs(len(points), samples, repeats,
                           n_prompts if n_prompts is not None else
                           len({s.prompt for s in samples}), settle)
    return SweepResult(
        rows=tuple(rows), step_s=step, baseline_tokens_per_s=base_tps, samples=len(samples),
        planned=planned,
        best=max(measured, key=lambda i: rows[i].speedup) if measured else None,
        best_predicted=max(predicted, key=lambda i: rows[i].predicted) if predicted else None,
        samples_list=tuple(samples))


COLUMNS = ("label", "k", "runs", "alpha", "tokens_per_round", "speedup", "worst", "c", "v",
           "predicted", "gap", "identical", "best")


def _cells(result: SweepResult, i: int) -> list[Any]:
    r = result.rows[i]
    return [r.label, r.k, r.runs, round(r.alpha, 4), round(r.tokens_per_round, 4),
            round(r.speedup, 4), round(r.worst, 4), round(r.c, 4), round(r.v, 4),
            round(r.predicted, 4), round(r.gap, 4), "" if r.identical is None else r.identical,
            "+".join(name for name, j in (("measured", result.best),
                                          ("predicted", result.best_predicted)) if j == i)]


def to_csv(result: SweepResult) -> str:
    import csv
    import io

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    for i in range(len(result.rows)):
        w.writerow(_cells(result, i))
    return out.getvalue()


def to_json(result: SweepResult) -> str:
    """Rows, the step, which rows are best, and every sample (so a sweep can resume)."""
    return json.dumps({
        "step_s": result.step_s, "baseline_tokens_per_s": result.baseline_tokens_per_s,
        "samples": result.samples, "planned": result.planned, "best": result.best,
        "best_predicted": result.best_predicted,
        "rows": [dict(zip(COLUMNS, _cells(result, i), strict=True))
                 for i in range(len(result.rows))],
        "runs": [{"point": s.point, "prompt": s.prompt, "repeat": s.repeat, **asdict(s.run)}
                 for s in result.samples_list],
    }, ensure_ascii=False, indent=1)


def samples_from_json(text: str) -> list[Sample]:
    """The samples a :func:`to_json` file holds (to resume a stopped sweep); ValueError names
    what is wrong with a file that is not one."""
    try:
        data = json.loads(text)
        out = []
        for r in data["runs"]:
            fields: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v)
                                      for k, v in r.items() if k not in ("point", "prompt",
                                                                         "repeat")}
            out.append(Sample(int(r["point"]), int(r["prompt"]), int(r["repeat"]),
                              Measured(**fields)))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a sweep file written by specviz ({type(exc).__name__}: {exc})"
                         ) from None
    return out


def table(result: SweepResult) -> str:
    """The sweep as text, one row per point, the best marked."""
    lines = [f"{'':<14} {'α':>5} {'tok/r':>5} {'measured':>8} {'worst':>6} {'c':>5} {'v':>5} "
             f"{'predicted':>9} {'gap':>6}"]
    for i, r in enumerate(result.rows):
        mark = (" ← best" if i == result.best else "") + \
            (" ← best predicted" if i == result.best_predicted else "")
        lines.append(f"{r.label:<14} {r.alpha:5.2f} {r.tokens_per_round:5.2f} "
                     f"{r.speedup:7.2f}x {r.worst:5.2f}x {r.c:5.2f} {r.v:5.2f} "
                     f"{r.predicted:8.2f}x {100 * r.gap:+5.0f}%{mark}")
    return "\n".join(lines)


__all__ = ["BASELINE", "MIN_REPEATS", "Measured", "Point", "Sample", "SweepResult", "SweepRow",
           "geomean", "k_points", "measure", "planned_runs", "run_sweep", "samples_from_json",
           "schedule", "settled", "spread", "summarize", "sweep_factory", "table", "to_csv",
           "to_json", "warm_up_sweep", "widest_pass"]
