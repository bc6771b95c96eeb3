"""specviz-cli: run speculative decoding headless; coloured text or JSON lines out."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, NoReturn

# Light imports only: torch and transformers load inside main(), where Ctrl+C is handled.
from .core.errors import InputError, SpecvizError, one_line
from .core.events import (
    Event,
    Round,
    RunFailed,
    RunFinished,
    RunStarted,
    Settings,
    Summary,
    to_json,
)
from .core.models import (
    BUNDLED_TARGET,
    DEFAULT_PROMPT,
    PRESETS,
    default_draft,
    load_pair,
    locate,
)
from .core.options import OPTIONS, Option, k_text
from .core.presets import CROSS_TOKENIZER_DRAFTER, CROSS_TOKENIZER_PRESETS
from .core.race import Race, as_race
from .core.run import PROMPT_LIMIT_CHARS, Request, check, cross_tokenizer, needs_draft_model
from .core.run import run as run_request

if TYPE_CHECKING:
    from .core.cross_tokenizer import SharedVocab

# Every preset the CLI takes: the app's, then those whose draft has a tokenizer of its own.
ALL_PRESETS = {**PRESETS, **CROSS_TOKENIZER_PRESETS}

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a Ctrl+C
EXIT_INPUT = 2  # a bad argument or prompt (argparse's own code for its refusals)

# ANSI styles, told apart by more than hue (strike-through, underline, bold) for
# colour-blind readers and monochrome terminals.
STYLE = {
    "accepted": "\x1b[34m",  # blue
    "rejected": "\x1b[9;31m",  # struck-through vermillion
    "resampled": "\x1b[4;33m",  # underlined orange
    "bonus": "\x1b[1;32m",  # bold green
    "target": "",
}
RESET = "\x1b[0m"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Bad arguments: one line (and, under --json, an error event) and exit 2."""
        _refuse(f"{message} (see --help)", json_out=self.json_out)

    json_out = False  # set from argv before parsing: an argparse error must know it


def _refuse(message: str, json_out: bool, kind: str = "input") -> NoReturn:
    """A refusal before any run: one line on stderr, an error event under --json, exit 2."""
    message = one_line(message)
    if json_out:
        sys.stdout.write(to_json(RunFailed(message=message, kind=kind)) + "\n")
        sys.stdout.flush()
    sys.stderr.write(f"specviz-cli: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_INPUT)


def _add_option(p: argparse.ArgumentParser, opt: Option) -> None:
    """One argument from the options table: its flag, type, default, range and help."""
    kind = {int: _int_arg, float: float, str: str}[opt.type]
    extra = f" ({opt.range_text()})" if opt.low is not None or opt.high is not None else ""
    names = opt.names()
    p.add_argument(opt.flag, type=kind, default=opt.default, metavar=opt.metavar,
                   choices=list(names) if names else None,
                   help=f"{opt.help}{extra}; default {opt.default}")


def _int_arg(text: str) -> int:
    """An integer argument (argparse's int() accepts any size; the range check follows)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def build_parser(json_out: bool = False) -> argparse.ArgumentParser:
    p = _Parser(prog="specviz-cli", description=__doc__)
    p.json_out = json_out
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", default=DEFAULT_PROMPT,
                        help="text to continue ('' starts from BOS; '-' reads standard input)")
    prompt.add_argument("--prompt-file", metavar="PATH",
                        help="read the prompt from a UTF-8 text file ('-' = standard input)")
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                   help="wrap the prompt in the model's chat template, if it has one")
    for opt in OPTIONS:
        _add_option(p, opt)
    p.add_argument("--pair", choices=list(ALL_PRESETS), metavar="PRESET",
                   help="a preset pair: " + "; ".join(ALL_PRESETS) + " (the pairs 'across "
                   f"tokenizers' draft with --drafter {CROSS_TOKENIZER_DRAFTER} unless "
                   "--drafter says otherwise; every '(hub)' pair downloads its models once)")
    p.add_argument("--draft", help="draft model: alias, hub id, folder or .gguf "
                   "(default: the shipped distilled draft)")
    p.add_argument("--target", default=None,
                   help=f"target model: alias, hub id, folder or .gguf (default: {BUNDLED_TARGET})")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"])
    p.add_argument("--device-map", default=None,
                   choices=["auto", "balanced", "balanced_low_0", "sequential"],
                   help="spread a target too big for one device over the GPUs, then CPU memory, "
                   "then disk (accelerate's big-model dispatch); the draft runs on the first GPU")
    p.add_argument("--baseline", action="store_true", help="run the target alone")
    p.add_argument("--race", action="store_true",
                   help="a race: the speculative run, then the target alone on the same prompt, "
                   "seed and settings, one after the other (they would share the cores); prints "
                   "each one's tokens/s, the measured speedup and, at T = 0, whether the texts "
                   "are identical. With --json: both runs' events, a race recording "
                   "(specviz --replay plays it as a race)")
    p.add_argument("--json", action="store_true", help="one JSON object per event, per line")
    return p


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(**{opt.name: getattr(args, opt.name) for opt in OPTIONS})


def _read_prompt(args: argparse.Namespace) -> str:
    """The prompt from --prompt, --prompt-file or standard input ('-'), as text."""
    source = args.prompt_file if args.prompt_file is not None else (
        "-" if args.prompt == "-" else None)
    if source is None:
        return str(args.prompt)
    try:
        if source == "-":
            data = sys.stdin.buffer.read()
            where = "standard input"
        else:
            where = source
            with open(source, "rb") as f:
                data = f.read(PROMPT_LIMIT_CHARS * 4 + 1)
    except OSError as exc:
        raise InputError(f"Cannot read the prompt from {source}: {exc.strerror or exc}.") \
            from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise InputError(f"The prompt in {where} is not UTF-8 text (byte {exc.start}).") \
            from None


def _render(events: Iterator[Event], out: IO[str], color: bool, err: IO[str],
            vocab: SharedVocab | None = None) -> int:
    """Human output: the text as it grows, each token styled by its fate, then a summary;
    with ``vocab`` (a draft with its own tokenizer) what the shared vocabulary covers."""
    status = 0
    for event in events:
        if isinstance(event, RunStarted):
            who = (f"{event.pair.draft} → {event.pair.target}"
                   if event.pair.draft and event.mode == "speculative"
                   else f"{event.pair.target} alone")
            st = event.settings
            how = (f", drafter={st.drafter}, {k_text(st)}"
                   if event.mode == "speculative" else "")
            scale = event.pair.draft_temperature_scale
            scaled = f" (q at T×{scale:g})" if scale != 1.0 and st.temperature else ""
            out.write(f"# {who}, {event.mode}{how}, "
                      f"T={st.temperature}{scaled}, seed={st.seed}\n")
            if st.lenience < 1.0:
                out.write(f"# lenience {st.lenience}: NOT EXACT, the output does not follow "
                          f"the target's distribution\n")
            if vocab is not None and event.mode == "speculative":
                seen = vocab.report(event.prompt_ids).text("prompt's")
                out.write(f"# across tokenizers: {seen}\n")
            out.write(event.prompt)
        elif isinstance(event, Round):
            out.write(_round_text(event, color))
        elif isinstance(event, RunFinished):
            s = event.summary
            out.write(f"\n\n# {s.tokens} tokens in {s.rounds} rounds, {s.wall_time_s:.2f} s "
                      f"({s.tokens_per_s:.1f} tok/s), stop: {event.stop_reason}\n")
            if s.drafted:
                by_pos = " ".join(f"{a:.2f}" for a in s.acceptance_by_position)
                per = (f" per position ({s.siblings} siblings tested beside, "
                       f"{s.siblings_kept} kept: each position counts once)") if s.siblings else ""
                out.write(f"# α = P(draft kept){per} = {s.alpha:.3f}; accepted ÷ drafted = "
                          f"{s.accepted}/{s.drafted} = {s.acceptance_rate:.3f}; "
                          f"{s.mean_tokens_per_round:.2f} tokens/round, "
                          f"{s.target_calls} target passes; by position: {by_pos}\n")
                if len(s.by_drafter) > 1:
                    out.write("# by drafter: " + ", ".join(
                        f"{d.drafter} α {d.accepted / d.tested if d.tested else 0:.3f} "
                        f"({d.accepted}/{d.tested})" for d in s.by_drafter) + "\n")
                if vocab is not None:
                    report = vocab.report(event.generated_ids)
                    out.write(f"# across tokenizers: {report.outside} of the last "
                              f"{report.counted} generated tokens "
                              f"({100 * report.outside_share:.1f}%) lie outside the shared "
                              f"vocabulary\n")
            if not s.exact:
                out.write("# NOT EXACT: lenience < 1 kept drafts the target would have "
                          "rejected; this text does not follow the target's distribution\n")
        elif isinstance(event, RunFailed):
            out.write("\n")
            err.write(f"specviz-cli: error: {one_line(event.message)}\n")
            status = 1
        out.flush()
    return status


def _round_text(event: Round, color: bool) -> str:
    """Accepted drafts, the rejected guess (struck), then the resampled/bonus token."""
    if not color:
        return event.appended_text
    parts: list[str] = []
    kept = len(event.appended_ids)
    for i, d in enumerate(event.drafted):
        if d.status == "accepted" and i < kept:
            parts.append(STYLE["accepted"] + event.appended_texts[i] + RESET)
        elif d.status == "rejected":
            parts.append(STYLE["rejected"] + d.text + RESET)
    if event.extra is not None and kept > event.n_accepted:
        parts.append(STYLE[event.extra.kind] + event.appended_texts[event.n_accepted] + RESET)
    return "".join(parts)


def race_summary(race: Race) -> str:
    """A finished race in words: each side's speed, the speedup and what it divides, identity."""
    assert race.speculative.finished is not None and race.baseline.finished is not None
    s = race.speculative.finished.summary
    b = race.baseline.finished.summary

    def per_token_ms(summary: Summary) -> float:
        return 1000 * summary.wall_time_s / summary.tokens if summary.tokens else 0.0

    lines = [
        f"# race: after an untimed {WARM_UP_TOKENS}-token warm-up of both, the speculative run, "
        "then the target alone, one after the other; each timed from its own start (prompt "
        "pass included)",
        f"#   speculative:  {s.tokens} tokens in {s.wall_time_s:.3f} s = "
        f"{s.tokens_per_s:.1f} tok/s ({per_token_ms(s):.2f} ms/token)",
        f"#   target alone: {b.tokens} tokens in {b.wall_time_s:.3f} s = "
        f"{b.tokens_per_s:.1f} tok/s ({per_token_ms(b):.2f} ms/token)",
        f"# measured speedup {race.speedup:.2f}× = target alone's wall time per token ÷ "
        f"speculative's = {per_token_ms(b):.2f} ms ÷ {per_token_ms(s):.2f} ms "
        "(the same as speculative tok/s ÷ target-alone tok/s)",
    ]
    identical = race.identical
    if identical is None:  # T > 0: both follow p, with different draws
        lines.append("# identical: not checked at T > 0 (the same distribution, different "
                     "draws: the texts may differ by design)")
    elif identical:
        lines.append(f"# identical: yes (T = 0: the same {s.tokens} token ids as the target "
                     "alone)")
    else:
        lines.append(f"# identical: no (T = 0: the texts first differ at output token "
                     f"{race.first_difference()})")
    if not race.speculative.started.settings.lenience >= 1.0:
        lines.append("# lenience < 1: the speculative run is not exact, its text may differ")
    return "\n".join(lines) + "\n"


WARM_UP_TOKENS = 2


def _warm_up(pair: Any, request: Request) -> None:
    """A short untimed race first, its events dropped: otherwise the race's first run alone
    pays the one-off costs of a fresh process (allocator, kernel set-up, on a GPU its context
    and libraries) that the second then skips. A failure here recurs in the race, reported."""
    s = request.settings
    short = replace(request, settings=replace(
        s, max_new_tokens=min(WARM_UP_TOKENS, s.max_new_tokens)))
    for _event in run_request(pair, short):
        pass


def _kept(events: Iterator[Event], into: list[Event]) -> Iterator[Event]:
    """Pass events through, keeping each in ``into``."""
    for event in events:
        into.append(event)
        yield event


class _Interrupt:
    """SIGINT: the first Ctrl+C during a run stops it after the round in flight (the run ends
    with stop_reason "stopped" and its summary); any other raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.running = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.running and not self.stop.is_set():
            self.stop.set()
            return
        raise KeyboardInterrupt


class _Cli:
    """One invocation: where output goes, and whether the run's final event is out yet."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: IO[str] = sys.stdout
        self.ended = False  # a run_finished or error event has been written
        self.interrupt = _Interrupt()

    def emit(self, event: Event) -> None:
        # One write per line: an interrupt cannot leave half a JSON object behind.
        self.out.write(to_json(event) + "\n")
        self.out.flush()
        self.ended = self.ended or isinstance(event, (RunFinished, RunFailed))

    def fail(self, message: str, kind: str) -> int:
        """Every failure: one line on stderr and, with --json, an error event on stdout."""
        message = one_line(message)
        if self.args.json and not self.ended:
            self.emit(RunFailed(message=message, kind=kind))
        print(f"specviz-cli: error: {message}", file=sys.stderr, flush=True)
        return EXIT_INPUT if kind == "input" else 1

    def interrupted(self) -> int:
        if self.args.json and not self.ended:
            self.emit(RunFailed(message="Stopped by Ctrl+C.", kind="stopped"))
        print("specviz-cli: stopped by Ctrl+C", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED

    def run(self) -> int:
        args = self.args
        if args.race and args.baseline:
            return self.fail("--race runs the target alone itself, after the speculative run: "
                             "drop --baseline.", "input")
        mode = "race" if args.race else "baseline" if args.baseline else "speculative"
        if args.pair in CROSS_TOKENIZER_PRESETS and not getattr(args, "drafter_given", False):
            args.drafter = CROSS_TOKENIZER_DRAFTER  # the one drafter such a pair can use
        try:  # before torch is imported (seconds): a bad setting or prompt fails at once
            request = Request(_read_prompt(args), _settings(args), mode, args.chat)
            check(request)
        except InputError as exc:
            return self.fail(str(exc), exc.kind)
        draft, target = ALL_PRESETS[args.pair] if args.pair else (args.draft, args.target)
        target = target or BUNDLED_TARGET
        no_draft = not needs_draft_model(request)  # the target alone, or lookup (registry)
        if not no_draft:
            draft = draft or default_draft()
            if draft is None:
                return self.fail("No draft model: pass --draft (alias, hub id, folder or .gguf).",
                                 "input")
        try:  # before torch is imported (seconds): a wrong name fails at once
            found_target = locate(target)
            found_draft = None if no_draft or draft is None else locate(draft)
        except SpecvizError as exc:
            return self.fail(str(exc), exc.kind)
        progress = None if args.json else (lambda msg: print(f"# {msg}", file=sys.stderr))
        _quiet_transformers()
        try:
            pair = load_pair(found_draft, found_target, args.device, args.dtype,
                             progress=progress, device_map=args.device_map,
                             cross_tokenizer=cross_tokenizer(request))
        except SpecvizError as exc:
            return self.fail(str(exc), exc.kind)
        seen: list[Event] = []  # a race's events, for its verdict at the end
        if args.race:  # an untimed short race first: a fresh process's one-off costs
            _warm_up(pair, request)
        events = _kept(run_request(pair, request, stop=self.interrupt.stop), seen)
        self.interrupt.running = True
        try:
            if args.json:
                status = 0
                for event in events:
                    self.emit(event)
                    if isinstance(event, RunFailed):
                        print(f"specviz-cli: error: {one_line(event.message)}", file=sys.stderr)
                        status = 1
            else:
                color = self.out.isatty() and "NO_COLOR" not in os.environ
                status = _render(events, self.out, color, sys.stderr, pair.shared_vocab)
        finally:
            self.interrupt.running = False
        if self.interrupt.stop.is_set():
            print("specviz-cli: stopped by Ctrl+C", file=sys.stderr, flush=True)
            return EXIT_INTERRUPTED
        race = as_race(seen) if args.race and status == 0 else None
        if race is not None and race.complete and not args.json:
            self.out.write("\n" + race_summary(race))
            self.out.flush()
        return status


def _quiet_transformers() -> None:
    """Our own "# Loading…" lines say what happens; transformers' "Loading weights" bar would
    only add lines to stderr. Its warnings (weights not initialised ...) stay: they matter."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def main(argv: list[str] | None = None) -> int:
    """Run once; failures are one line (and a JSON error event), never a traceback."""
    raw = sys.argv[1:] if argv is None else argv
    args = build_parser(json_out="--json" in raw).parse_args(raw)
    # Whether --drafter was given: a preset across tokenizers picks its drafter otherwise.
    args.drafter_given = any(a == "--drafter" or a.startswith("--drafter=") for a in raw)
    cli = _Cli(args)
    handler: Any = None
    if threading.current_thread() is threading.main_thread():
        handler = signal.signal(signal.SIGINT, cli.interrupt)
    try:
        return cli.run()
    except KeyboardInterrupt:
        return cli.interrupted()
    except BrokenPipeError:  # the reader went away (| head): nothing left to tell it
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stops the flush at exit failing
        return 1
    except Exception as exc:  # noqa: BLE001 - whatever broke, the user gets one line
        return cli.fail(f"Unexpected {type(exc).__name__}: {exc}", "internal")
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


if __name__ == "__main__":
    sys.exit(main())
