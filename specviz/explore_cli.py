"""specviz-explore: lineups, K sweeps, prompt-set tables and where the draft goes wrong.

    specviz-explore lineup "k=2" "k=8" "k_policy=cost" [--prompt …] [--save F] [--html F] [--gif F]
    specviz-explore sweep --k 1,2,4,8 [--prompts FILE] [--repeats 3 --settle 0.05] [--csv F] …
    specviz-explore set PROMPTS.jsonl [--per-category 5] [--config "k=4" …] [--markdown F] [--png F]
    specviz-explore diagnose RECORDING.jsonl [--markdown F]

A configuration is ``key=value`` pairs over the run settings (``k``, ``k_policy``,
``drafter``, ``lookup_k``, ``temperature``, ``lenience`` …), separated by commas or spaces,
applied on top of the CLI's defaults. Runs never overlap: each configuration runs after the
other (they would share the cores) and speedups divide by the target alone run beside them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from .core.errors import InputError, SpecvizError, one_line
from .core.events import Settings
from .core.models import BUNDLED_TARGET, DEFAULT_PROMPT, PRESETS

PROG = "specviz-explore"
ALIASES = {"policy": "k_policy", "t": "temperature", "temp": "temperature",
           "lookup": "lookup_k", "new": "max_new_tokens", "tokens": "max_new_tokens"}
# Settings a configuration may not set: the lineup shares them, or they are not about speed.
FIXED_KEYS = ("seed", "max_new_tokens", "top_n")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def base_settings(args: argparse.Namespace) -> Settings:
    """The CLI's defaults, with the shared options given."""
    return Settings(temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                    seed=args.seed)  # every other option at its default (core/options.py)


def parse_config(text: str, base: Settings, allow_fixed: bool = False) -> Settings:
    """``"k=2, k_policy=fixed"`` applied on ``base``, each pair read and checked by the options
    table (``options.parse_assignment``); InputError says what is wrong."""
    from .core.options import BY_NAME, parse_assignment, validate

    settings = base
    parts = text.replace(",", " ").split()
    for part in parts:
        key, eq, value = part.partition("=")
        key = ALIASES.get(key.strip().lower().replace("-", "_"), key.strip().lower())
        if not eq or not value:
            raise InputError(f"{text!r}: write each setting as key=value (e.g. k=4), got {part!r}.")
        if key not in BY_NAME:
            raise InputError(f"{text!r}: no setting {key!r}; settings: "
                             f"{', '.join(n for n in BY_NAME if n not in FIXED_KEYS)}.")
        if key in FIXED_KEYS and not allow_fixed:
            raise InputError(f"{text!r}: {key} is shared by every run (set it with "
                             f"--{key.replace('_', '-')}).")
        try:
            settings = parse_assignment(f"{key}={value}", settings)
        except InputError as exc:  # each pair is checked as it is applied, in order
            if len(parts) == 1:
                raise
            raise InputError(f"in {text!r}: {exc}") from None
    if not parts:
        raise InputError(f"{text!r}: an empty configuration (write key=value, e.g. k=4).")
    validate(settings)
    return settings


def parse_lane(text: str, base: Settings) -> tuple[Settings, str | None]:
    """A lineup lane's configuration: :func:`parse_config`'s pairs, and ``draft=SPEC`` for a
    draft model of its own (alias, preset, hub id, folder or .gguf; None: the pair's)."""
    from .core.lineup import DRAFT_KEY

    draft = None
    rest = []
    for part in text.replace(",", " ").split():
        key, eq, value = part.partition("=")
        if key.strip().lower() == DRAFT_KEY and eq:
            if not value:
                raise InputError(f"{text!r}: write draft=PATH (a folder, .gguf, hub id, alias "
                                 "or preset).")
            if draft is not None:
                raise InputError(f"{text!r}: one draft= per lane.")
            draft = value
        else:
            rest.append(part)
    settings = parse_config(" ".join(rest), base) if rest else base
    if draft is not None and settings.drafter == "lookup":
        raise InputError(f"{text!r}: draft= needs a drafter that uses a draft model (model or "
                         "hybrid), not lookup.")
    return settings, draft


def config_label(text: str) -> str:
    return " ".join(text.replace(",", " ").split())


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", choices=list(PRESETS), metavar="PRESET",
                   help="a preset pair: " + "; ".join(PRESETS))
    p.add_argument("--draft", help="draft model (default: the shipped distilled draft)")
    p.add_argument("--target", help=f"target model (default: {BUNDLED_TARGET})")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"])
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                   help="wrap prompts in the model's chat template, if it has one")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (the default)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0 = torch's default); on a busy machine 1 is often "
                   "much faster than two threads spinning against each other")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    lineup = sub.add_parser("lineup", help="2-4 configurations of one prompt, side by side on "
                            "one clock, beside the target alone")
    lineup.add_argument("configs", nargs="+", metavar="CONFIG",
                        help='"k=2", "k=8", "k_policy=cost", "drafter=lookup lookup_k=16", '
                        '"k=4 draft=PATH" (another draft model, same tokenizer) …')
    lineup.add_argument("--prompt", default=DEFAULT_PROMPT)
    lineup.add_argument("--no-baseline", action="store_true",
                        help="leave out the target-alone lane (then no speedups)")
    lineup.add_argument("--save", type=Path, help="write the lineup recording (JSON lines; "
                        "specviz --replay and any recording reader take it)")
    lineup.add_argument("--json", action="store_true", help="the recording on stdout")
    lineup.add_argument("--html", type=Path, help="a page of every lane's tokens coloured by "
                        "fate, under the ranking")
    lineup.add_argument("--png", type=Path, help="the lineup's end as a 1920×1080 slide")
    lineup.add_argument("--gif", type=Path, help="the lanes played on one clock, 1920×1080")
    _add_model_args(lineup)

    sweep = sub.add_parser("sweep", help="speedup and α against K, beside the prediction "
                           "E[tokens per round] ÷ (K·c + v)")
    sweep.add_argument("--k", default="1,2,3,4,6,8", help="K values, comma-separated")
    sweep.add_argument("--drafters", default="model",
                       help="drafters, comma-separated (each swept over K; fixed K)")
    sweep.add_argument("--temperatures", default=None,
                       help="temperatures, comma-separated (default: --temperature)")
    sweep.add_argument("--prompt", action="append",
                       help="a prompt (repeatable; default: the app's first prompt)")
    sweep.add_argument("--prompts", type=Path, help="a prompt file (one per line or Spec-Bench "
                       "JSON lines)")
    sweep.add_argument("--per-category", type=int, default=None,
                       help="with --prompts: the first N of each category")
    sweep.add_argument("--repeats", type=int, default=1)
    sweep.add_argument("--settle", type=float, default=None, metavar="SPREAD",
                       help="with --repeats 3 or more: stop repeating a point once its speedup "
                       "has varied by at most SPREAD (0.05 = 5%%) on every prompt over its "
                       "first 2+ repeats; the others go on, interleaved as before")
    sweep.add_argument("--csv", type=Path)
    sweep.add_argument("--json", type=Path, help="rows and every run (resumable)")
    sweep.add_argument("--png", type=Path, help="the plot (Pillow)")
    sweep.add_argument("--resume", type=Path, help="a --json file of a stopped sweep: "
                       "run only what it lacks")
    _add_model_args(sweep)

    pset = sub.add_parser("set", help="a prompt file's table by category")
    pset.add_argument("path", type=Path, help="one prompt per line, or Spec-Bench's "
                      "question.jsonl")
    pset.add_argument("--config", nargs="+", default=None, metavar="CONFIG",
                      help="configurations to run (default: the CLI's, hybrid drafting with "
                      "the cost policy)")
    pset.add_argument("--per-category", type=int, default=None)
    pset.add_argument("--categories", default=None, help="comma-separated")
    pset.add_argument("--csv", type=Path)
    pset.add_argument("--markdown", type=Path)
    pset.add_argument("--png", type=Path, help="the table as a picture (Pillow)")
    pset.add_argument("--save", type=Path, help="each prompt's outcome as it finishes (JSON "
                      "lines; --resume takes it)")
    pset.add_argument("--resume", type=Path, help="a --save file of a stopped set: run only "
                      "the prompts it lacks, adding them to it (or to --save)")
    _add_model_args(pset)

    diag = sub.add_parser("diagnose", help="where the draft goes wrong in a recording")
    diag.add_argument("recording", type=Path)
    diag.add_argument("--top", type=int, default=20)
    diag.add_argument("--markdown", type=Path)
    return p


class _Interrupt:
    """The first Ctrl+C stops after the run in flight (partial results kept); another ends."""

    def __init__(self) -> None:
        self.stop = threading.Event()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.stop.is_set():
            self.stop.set()
            print(f"{PROG}: stopping after the run in flight (Ctrl+C again to quit)",
                  file=sys.stderr, flush=True)
            return
        raise KeyboardInterrupt


def say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def load(args: argparse.Namespace, need_draft: bool = True) -> Any:
    from .core.models import default_draft, load_pair, locate

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    draft, target = PRESETS[args.pair] if args.pair else (args.draft, args.target)
    target = target or BUNDLED_TARGET
    if need_draft:
        draft = draft or default_draft()
        if draft is None:
            raise InputError("No draft model: pass --draft (alias, hub id, folder or .gguf).")
    found_draft = locate(draft) if need_draft and draft else None
    found_target = locate(target)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    return load_pair(found_draft, found_target, args.device, args.dtype, progress=say)


def _prompt(pair: Any, args: argparse.Namespace, text: str) -> str:
    from .core.engine import chat_prompt

    return chat_prompt(pair.tokenizer, text) if args.chat and text else text


# -- lineup ---------------------------------------------------------------------------------


def cmd_lineup(args: argparse.Namespace, stop: threading.Event) -> int:
    from .core.events import RunFailed, RunFinished, to_json
    from .core.lineup import MAX_LANES, LaneSpec, as_lineup, run_lineup

    base = base_settings(args)
    lanes = []
    for c in args.configs:
        settings, draft = parse_lane(c, base)
        lanes.append(LaneSpec(settings, draft=draft))
    if not args.no_baseline:
        lanes.append(LaneSpec(base, mode="baseline"))
    if len(args.configs) > MAX_LANES - 1 or len(lanes) < 2:
        raise InputError(f"A lineup runs 1 to {MAX_LANES - 1} configurations beside the target "
                         f"alone (2 to {MAX_LANES - 1} with --no-baseline), got "
                         f"{len(args.configs)}.")
    from .core.lineup import draft_source
    from .core.models import locate

    for lane in lanes:  # a wrong draft= fails now, not after the pair has loaded
        if lane.draft is not None:
            locate(draft_source(lane.draft))
    pair = load(args, need_draft=any(ln.settings.drafter != "lookup" and ln.draft is None
                                     for ln in lanes))
    prompt = _prompt(pair, args, args.prompt)
    say("warm-up (untimed, 2 tokens per lane)")
    short = [dataclasses.replace(ln, settings=dataclasses.replace(
        ln.settings, max_new_tokens=2)) for ln in lanes]
    drafts: dict[str, Any] = {}  # lanes' own draft models, loaded once (in the warm-up)
    for _ in run_lineup(pair, short, prompt, loaded=drafts):
        pass
    if any(ln.settings.k_policy == "cost" for ln in lanes):
        from .core.engine import calibrate

        calibrate(pair)  # the cost policy's v(n), timed once per pair: not inside a lane's clock
    events = []
    status = 0
    for event in run_lineup(pair, lanes, prompt, stop, drafts):
        events.append(event)
        if args.json:
            print(to_json(event), flush=True)
        if isinstance(event, RunFinished):
            s = event.summary
            say(f"lane {sum(isinstance(e, RunFinished) for e in events)}/{len(lanes)}: "
                f"{s.tokens} tokens in {s.wall_time_s:.2f} s")
        elif isinstance(event, RunFailed):
            print(f"{PROG}: error: {one_line(event.message)}", file=sys.stderr)
            status = 1
    if args.save:
        args.save.write_text("".join(to_json(e) + "\n" for e in events), encoding="utf-8")
        say(f"saved {args.save}")
    lineup = as_lineup(events)
    if lineup is not None and not args.json:
        print(lineup_card(lineup))
    if lineup is not None and lineup.complete:
        write_lineup_exports(events, args)
    elif any((args.html, args.png, args.gif)):
        say("the lineup did not finish: nothing exported")
    return status


def write_lineup_exports(events: Sequence[Any], args: argparse.Namespace) -> None:
    """--html, --png, --gif of a finished lineup (the slides need Qt: imported only then)."""
    wanted = [p for p in (args.html, args.png, args.gif) if p]
    if not wanted:
        return
    from .gui.stage.export import (
        export_animation,
        export_lineup_html,
        final_frame,
        writable_problem,
    )
    from .gui.stage.lineup_view import lineup_of

    for path in wanted:
        problem = writable_problem(path)
        if problem:
            raise InputError(problem)
    lineup = lineup_of(events)
    if args.html:
        from .core.lineup import as_lineup

        export_lineup_html(lineup or as_lineup(events), args.html)  # a race's two lanes too
        say(f"wrote {args.html}")
    if args.png or args.gif:
        from .gui.startup import make_app

        app = make_app()
        if args.png:
            final_frame(events).save(str(args.png))
            say(f"wrote {args.png}")
        if args.gif:
            n = export_animation(events, args.gif)
            say(f"wrote {args.gif} ({n} frames)")
        del app


def lineup_card(lineup: Any) -> str:
    """The end card: lanes ranked by measured speed."""
    lines = [f"{'#':>2}  {'lane':<44} {'tokens':>6} {'tok/s':>7} {'tok/round':>9} "
             f"{'speedup':>8}  identical"]
    for rank, lane in enumerate(lineup.ranking(), 1):
        label = lineup.label(lane)
        if lane.finished is None:
            lines.append(f"{rank:>2}  {label:<44} (did not finish)")
            continue
        s = lane.finished.summary
        speed = lineup.speedup(lane)
        same = lineup.identical(lane)
        lines.append(f"{rank:>2}  {label:<44} {s.tokens:>6} {s.tokens_per_s:>7.1f} "
                     f"{s.mean_tokens_per_round:>9.2f} "
                     f"{(f'{speed:.2f}x' if speed else '-'):>8}  "
                     f"{'-' if same is None else 'yes' if same else 'NO'}")
    return "\n".join(lines)


# -- sweep ----------------------------------------------------------------------------------


def _numbers(text: str, kind: type, what: str) -> list[Any]:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{what} must be comma-separated numbers, got {text!r}.") from None
    if not values:
        raise InputError(f"{what}: no values in {text!r}.")
    return values


def sweep_points(args: argparse.Namespace) -> list[Any]:
    from .core.options import validate
    from .core.sweep import Point

    base = dataclasses.replace(base_settings(args), drafter="model", k_policy="fixed")
    ks = _numbers(args.k, int, "--k")
    temps = (_numbers(args.temperatures, float, "--temperatures") if args.temperatures
             else [args.temperature])
    drafters = [d.strip() for d in args.drafters.split(",") if d.strip()]
    points = []
    for d in drafters:
        for t in temps:
            for k in ks:
                s = dataclasses.replace(base, drafter=d, temperature=t, k=k,
                                        lookup_k=k if d == "lookup" else base.lookup_k)
                validate(s)
                label = " ".join(x for x in (d if len(drafters) > 1 else "",
                                             f"T {t:g}" if len(temps) > 1 else "", f"K {k}") if x)
                points.append(Point(label, s))
    return points


def cmd_sweep(args: argparse.Namespace, stop: threading.Event) -> int:
    from .core import sweep as sw

    t_start = time.perf_counter()
    points = sweep_points(args)
    if args.repeats < 1:
        raise InputError(f"--repeats must be at least 1, got {args.repeats}.")
    if args.settle is not None and not args.settle >= 0:
        raise InputError(f"--settle must be a spread of 0 or more (0.05 = 5%), got "
                         f"{args.settle}.")
    if args.prompts:
        from .core.promptset import pick, read_prompts

        texts = [i.text for i in pick(read_prompts(args.prompts), args.per_category)]
    else:
        texts = args.prompt or [DEFAULT_PROMPT]
    done: list[Any] = []
    if args.resume:
        try:
            done = sw.samples_from_json(args.resume.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"cannot read {args.resume}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise InputError(f"{args.resume}: {exc}") from None
    pair = load(args, need_draft=any(p.settings.drafter != "lookup" for p in points))
    prompts = [_prompt(pair, args, t) for t in texts]
    total = sw.planned_runs(len(points), done, args.repeats, len(prompts), args.settle)
    samples = list(done)
    say(f"{len(points)} points × {len(prompts)} prompts × {args.repeats} repeats + the target "
        f"alone = {total} runs" + (" at most" if args.settle is not None else "")
        + (f", {len(done)} already done" if done else ""))
    t_loaded = time.perf_counter()
    if total > len(done) and prompts:
        say("warm-up (untimed)")
        sw.warm_up_sweep(pair, points, prompts[0], stop)
    t0 = time.perf_counter()
    ran = 0
    inside = 0.0  # the runs' own clocks
    for sample in sw.run_sweep(pair, points, prompts, args.repeats, stop,
                               done={s.key for s in done}, warm_up=False, settle=args.settle,
                               earlier=done):
        samples.append(sample)
        inside += sample.run.wall_s
        ran += 1
        total = sw.planned_runs(len(points), samples, args.repeats, len(prompts), args.settle)
        left = total - len(samples)
        eta = (time.perf_counter() - t0) / ran * left
        name = "target alone" if sample.point == sw.BASELINE else points[sample.point].label
        say(f"{len(samples)}/{total} {name}, prompt {sample.prompt + 1}, repeat "
            f"{sample.repeat + 1}: {sample.run.tokens_per_s:.1f} tok/s (about {eta:.0f} s left)")
    result = sw.summarize(points, samples, args.repeats, len(prompts), args.settle)
    print(sw.table(result))
    print(f"# target step {1000 * result.step_s:.1f} ms; {result.samples}/{result.planned} runs"
          + ("" if result.complete else " (stopped: partial, --resume with the --json file)"))
    end = time.perf_counter()
    print(f"# {end - t_start:.0f} s in all: loading {t_loaded - t_start:.1f} s, warm-up "
          f"{t0 - t_loaded:.1f} s, {ran} runs {end - t0:.1f} s (inside their clocks "
          f"{inside:.1f} s)")
    write_outputs(result, args)
    return 0


def write_outputs(result: Any, args: argparse.Namespace) -> None:
    from .core import sweep as sw

    if args.csv:
        args.csv.write_text(sw.to_csv(result), encoding="utf-8")
        say(f"wrote {args.csv}")
    if args.json:
        args.json.write_text(sw.to_json(result), encoding="utf-8")
        say(f"wrote {args.json}")
    if args.png:
        from .explore_plot import sweep_png

        sweep_png(result, args.png)
        say(f"wrote {args.png}")


# -- prompt set -----------------------------------------------------------------------------


def cmd_set(args: argparse.Namespace, stop: threading.Event) -> int:
    from .core.promptset import (
        header_line,
        in_order,
        outcome_line,
        pick,
        read_outcomes,
        read_prompts,
        results_of,
        skipped_line,
        table,
        to_csv,
        to_markdown,
        to_text,
    )

    base = base_settings(args)
    texts = args.config or []
    configs = [(config_label(c), parse_config(c, base)) for c in texts] or \
        [(f"{base.drafter} {base.k_policy}", base)]
    cats = [c.strip() for c in args.categories.split(",")] if args.categories else None
    items = pick(read_prompts(args.path), args.per_category, cats)
    kept = []  # every outcome the --resume file holds
    if args.resume:
        try:
            text = args.resume.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read {args.resume}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise InputError(f"{args.resume} is not UTF-8 text") from None
        try:
            kept = read_outcomes(text, configs)
        except ValueError as exc:
            raise InputError(f"{args.resume}: {exc}") from None
    earlier = in_order(items, kept)
    out = None
    if args.save or args.resume:  # each prompt's outcome, saved as it finishes
        path = args.save or args.resume
        # Written whole first (a last line cut short is dropped; nothing kept is lost), then
        # each new prompt appended as it finishes.
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join([header_line(configs) + "\n",
                                *(outcome_line(o) + "\n" for o in kept)]), encoding="utf-8")
        os.replace(tmp, path)
        out = path.open("a", encoding="utf-8")
    try:
        outcomes = run_set(args, items, configs, earlier, stop, out)
    finally:
        if out is not None:
            out.close()
    skipped = skipped_line(outcomes)
    results = results_of(outcomes)
    if not results:
        say(skipped or "stopped before any prompt finished")
        return 0
    rows = table(results)
    print(to_text(rows) + (f"{skipped}\n" if skipped else ""), end="")
    if args.csv:
        args.csv.write_text(to_csv(rows), encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(to_markdown(rows, skipped), encoding="utf-8")
    if out is not None:
        say(f"saved {out.name}" + ("" if len(outcomes) == len(items)
                                  else f" (stopped: --resume {out.name} runs the rest)"))
    if args.png:
        from .explore_plot import promptset_png

        done = len(outcomes)
        promptset_png(rows, args.png, f"{args.path.name}: speedup over the target alone",
                      f"{done}/{len(items)} prompts" + ("" if done == len(items) else
                                                        " (stopped: partial)")
                      + (f", {skipped.split(':')[0]}" if skipped else ""))
    return 0


def run_set(args: argparse.Namespace, items: Sequence[Any], configs: Sequence[Any],
            earlier: Sequence[Any], stop: threading.Event, out: Any) -> list[Any]:
    """Run the prompts ``earlier`` lacks, each outcome written to ``out`` as it finishes; every
    outcome (earlier and new) in the prompts' order."""
    from .core.promptset import in_order, outcome_line, run_prompt_set

    say(f"{len(items)} prompts × ({len(configs)} configurations + the target alone)"
        + (f", {len(earlier)} already done" if earlier else ""))
    outcomes = list(earlier)
    if len(earlier) == len(items):
        return outcomes  # nothing left to run: no models to load
    pair = load(args, need_draft=any(s.drafter != "lookup" for _, s in configs))
    for o in run_prompt_set(pair, items, configs, chat=args.chat, stop=stop,
                            done={e.item for e in earlier}):
        outcomes.append(o)
        if out is not None:
            out.write(outcome_line(o) + "\n")
            out.flush()
        if o.skipped is not None:
            say(f"{o.item.category} {o.item.id}: skipped: {o.skipped}")
        for r in o.results:
            say(f"{r.item.category} {r.item.id} {r.config}: {r.speedup:.2f}x")
    return in_order(items, outcomes)


# -- diagnose -------------------------------------------------------------------------------


def cmd_diagnose(args: argparse.Namespace, stop: threading.Event) -> int:
    from .core.diagnose import diagnose, to_markdown
    from .core.recording import RecordingError, read_recording

    try:
        events = read_recording(args.recording)
    except RecordingError as exc:
        raise InputError(f"{args.recording}: {exc}") from None
    text = to_markdown(diagnose(events, top=args.top))
    print(text, end="")
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    return 0


COMMANDS = {"lineup": cmd_lineup, "sweep": cmd_sweep, "set": cmd_set, "diagnose": cmd_diagnose}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; failures are one line, never a traceback."""
    args = build_parser().parse_args(argv)
    interrupt = _Interrupt()
    handler: Any = None
    if threading.current_thread() is threading.main_thread():
        handler = signal.signal(signal.SIGINT, interrupt)
    try:
        return COMMANDS[args.command](args, interrupt.stop)
    except (SpecvizError, ValueError) as exc:  # PromptSetError, a failed run's message
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: stopped by Ctrl+C", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 1
    except OSError as exc:
        print(f"{PROG}: error: {exc.strerror or exc}: {getattr(exc, 'filename', '')}",
              file=sys.stderr, flush=True)
        return 1
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


if __name__ == "__main__":
    sys.exit(main())
