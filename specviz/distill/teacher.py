"""`specviz distill teacher`: teacher rows by the million, in resumable shards outside the repo.

Each shard is made in two stages, both by the target (p) itself:

1. prompts: a mix of sources (``--mix``). ``self``: the target writes the *user* turn of its
   own chat template (after an optional opener such as "How" or "Write"), so prompts come in
   the target's own style and in any number; ``zh`` and ``code``: the same with Chinese or
   programming openers; ``text``: a short plain-text continuation the target samples (no chat
   template); ``general``: a line of assets/prompts/general.txt; ``templates``: a built-in
   template filling. Generated prompts are deduplicated against every earlier shard, and no
   prompt of any source equals or contains an evaluation prompt (the hand-written set,
   FREE_PROMPTS and the template hold-out: :class:`~specviz.distill.prompts.EvalFilter`);
2. rows: the target answers the prompts (cycling T = 1, 0, 0.7, 1 as ``specviz distill``
   does) and its top-k next-token log-probs are stored for every answer token.

Shard ``i`` is written as ``shard_i.pt`` (the format of :func:`specviz.distill.data.save_shard`)
and then ``shard_i.json``, its manifest (prompt mix, rows, hardware, teacher precision,
command); a shard counts once its manifest exists. Shard ``i`` depends only on the seed and
the shards before it, so an interrupted run (Ctrl-C, SIGTERM) resumes with the same command
and writes exactly what an uninterrupted run would. ``specviz distill --teacher-dir DIR``
trains on every shard under ``DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specviz.core.models import cache_root

from .data import (
    GREEDY_PREFIX_MAX,
    ROW_TEMPERATURES,
    TeacherSeq,
    _eos_ids,
    count_rows,
    encode_prompt,
    sample_batch,
    save_shard,
)
from .prompts import (
    EVAL_HANDWRITTEN,
    GENERAL,
    EvalFilter,
    prompt_key,
    read_lines,
    train_prompts,
)

DEFAULT_MIX = "self=0.5,code=0.1,zh=0.05,text=0.12,general=0.08,templates=0.15"
SOURCES = ("self", "code", "zh", "text", "general", "templates")
SAMPLED = ("self", "code", "zh", "text")
RUN_FILE = "run.json"

# Openers the target continues inside its user turn ("" lets it start the turn itself).
EN_OPENERS = ("", "", "", "", "How", "Why", "What", "Can you", "Could you", "Write", "Explain",
              "Tell me", "Give me", "I", "My", "Is it", "Which", "Describe", "Help me",
              "Compare", "Summarize", "List", "Should I", "Where", "When", "Who", "Create",
              "Suggest", "Please", "I need", "Do you know", "Make a", "Plan", "Imagine")
CODE_OPENERS = ("Write a Python function", "Write a Python script", "In Python, how",
                "Write a JavaScript function", "Write a SQL query", "What does this code do",
                "Fix this code", "Write a C++ program", "Explain this error", "Write a bash",
                "Write a function in", "How do I use", "Write a class", "What is the difference "
                "between a list", "Write a program that", "How can I sort", "Implement")
ZH_OPENERS = ("请", "为什么", "如何", "怎么", "什么是", "写一", "给我", "帮我", "请解释", "你能",
              "我想", "用Python", "介绍一下", "列出")
TEXT_OPENERS = ("The", "In", "Once upon a time", "def", "import", "#", "It was", "When",
                "According to", "Chapter", "Dear", "1.", "A", "Today", "Scientists",
                "The history of", "class", "From", "How to", "Recipe:", "Q:", "User:", "他",
                "今天")


@dataclass(frozen=True)
class Prompt:
    """A training prompt: its text, whether it goes through the chat template, its source."""

    text: str
    chat: bool
    source: str


def parse_mix(spec: str) -> dict[str, float]:
    """``"self=0.5,general=0.2"`` -> weights (normalised; unknown sources refused)."""
    mix: dict[str, float] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in SOURCES:
            raise ValueError(f"unknown prompt source {name!r} (known: {', '.join(SOURCES)})")
        mix[name] = float(value)
        if mix[name] < 0:
            raise ValueError(f"negative weight for {name}")
    total = sum(mix.values())
    if total <= 0:
        raise ValueError("the prompt mix has no positive weight")
    return {k: v / total for k, v in mix.items() if v > 0}


def cjk_share(text: str) -> float:
    """Share of CJK ideographs and CJK punctuation among the letters of ``text``."""
    letters = [c for c in text if c.isalpha() or "\u3000" <= c <= "\u303f"
               or "\uff00" <= c <= "\uffef"]
    cjk = sum("\u4e00" <= c <= "\u9fff" or "\u3000" <= c <= "\u303f" or "\uff00" <= c <= "\uffef"
              for c in letters)
    return cjk / max(len(letters), 1)


def user_turn_parts(tokenizer: Any) -> tuple[str, str] | None:
    """The chat template's text before and after a user message (None without a template)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    mark = "\ue000"
    text = str(tokenizer.apply_chat_template([{"role": "user", "content": mark}],
                                             tokenize=False, add_generation_prompt=False))
    if mark not in text:
        return None
    before, after = text.split(mark, 1)
    return before, after


class PromptMaker:
    """Draws the prompts of a shard from the mix: sampled by the target, or listed."""

    def __init__(self, model: Any, tokenizer: Any, mix: dict[str, float],
                 evaluation: EvalFilter, max_prompt_tokens: int = 64,
                 keep_unfinished: bool = False, general: list[str] | None = None,
                 templates: list[tuple[str, bool]] | None = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.evaluation = evaluation
        self.max_prompt_tokens = max_prompt_tokens
        self.keep_unfinished = keep_unfinished
        self.parts = user_turn_parts(tokenizer)
        self._prefix_ids = ([] if self.parts is None else
                            tokenizer.encode(self.parts[0], add_special_tokens=False))
        eos = _eos_ids(model, tokenizer)
        self.stop = set(eos)
        if self.parts is not None:
            after = tokenizer.encode(self.parts[1], add_special_tokens=False)
            if after:
                self.stop.add(int(after[0]))  # the token that closes a user turn
        self.pad = (tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                    else min(eos, default=0))
        general = read_lines(GENERAL) if general is None else general
        templates = train_prompts() if templates is None else templates
        self.listed = {
            "general": [Prompt(t, True, "general") for t in general if evaluation.allows(t)],
            "templates": [Prompt(t, c, "templates") for t, c in templates
                          if evaluation.allows(t)],
        }
        if self.parts is None:  # no chat template: the target can only write plain text
            chat_share = sum(v for k, v in mix.items() if k in ("self", "code", "zh"))
            mix = {k: v for k, v in mix.items() if k not in ("self", "code", "zh")}
            mix["text"] = mix.get("text", 0.0) + chat_share
        self.mix = {k: v for k, v in mix.items()
                    if v > 0 and (k in SAMPLED or self.listed.get(k))}

    def _openers(self, source: str) -> tuple[str, ...]:
        return {"self": EN_OPENERS, "code": CODE_OPENERS, "zh": ZH_OPENERS,
                "text": TEXT_OPENERS}[source]

    def _sample(self, wanted: list[tuple[str, str]], rng: random.Random,
                gen: torch.Generator) -> list[Prompt | None]:
        """One batched pass of the target: a prompt (or None if unusable) per (source, opener)."""
        encoded, cuts, heads = [], [], []
        for source, opener in wanted:
            if source == "text":
                ids = self.tokenizer.encode(opener, add_special_tokens=False)
                bos = self.tokenizer.bos_token_id
                encoded.append(([bos] if bos is not None else []) + ids or [self.pad])
                heads.append(ids)
                cuts.append(rng.randint(6, 24))
            else:
                assert self.parts is not None
                ids = self.tokenizer.encode(self.parts[0] + opener, add_special_tokens=False)
                encoded.append(ids)
                head = ids[len(self._prefix_ids):]  # the opener's own tokens
                heads.append(head if ids[:len(self._prefix_ids)] == self._prefix_ids else None)
                cuts.append(0)
        steps = max(self.max_prompt_tokens, max(cuts))
        stops = {self.pad} | self.stop
        seqs = sample_batch(self.model, encoded, [1.0] * len(encoded), steps, 1, stops,
                            self.pad, gen)
        out: list[Prompt | None] = []
        for (source, opener), seq, cut, head in zip(wanted, seqs, cuts, heads, strict=True):
            new = seq.ids[seq.start:].tolist()
            if source == "text":
                new = [t for t in new[:cut] if t not in stops]
            else:
                finished = bool(new) and new[-1] in stops
                if finished:
                    new = new[:-1]
                elif not self.keep_unfinished:
                    out.append(None)
                    continue
            # Decoded with the opener's tokens, so the join is the tokenizer's own.
            text = (self.tokenizer.decode(head + new, skip_special_tokens=True) if head is not None
                    else opener + self.tokenizer.decode(new, skip_special_tokens=True))
            out.append(Prompt(text.strip(), source != "text", source))
        return out

    def usable(self, p: Prompt | None) -> bool:
        """A sensible prompt that is not, and does not contain, an evaluation prompt."""
        if p is None or not 8 <= len(p.text) <= 600 or "\ufffd" in p.text:
            return False
        if "<|" in p.text or "|>" in p.text or len(prompt_key(p.text)) < 6:
            return False
        if p.source == "zh" and cjk_share(p.text) < 0.6:
            return False  # a small target's "Chinese" is often mixed-script noise
        return self.evaluation.allows(p.text)

    def make(self, n: int, rng: random.Random, gen: torch.Generator,
             seen: set[str], rounds: int = 2) -> list[Prompt]:
        """``n`` prompts from the mix; sampled ones new (not in ``seen``, which is updated)."""
        names = list(self.mix)
        picks = Counter(rng.choices(names, weights=[self.mix[k] for k in names], k=n))
        out: list[Prompt] = []
        keys_here: set[str] = set()
        for name in names:
            if name in self.listed and picks[name]:
                pool = self.listed[name]
                for p in rng.sample(pool, min(picks[name], len(pool))):
                    out.append(p)
                    keys_here.add(prompt_key(p.text))
                picks[name] -= min(picks[name], len(pool))
        need = {k: picks[k] for k in SAMPLED if picks.get(k)}
        for _ in range(rounds):
            if not any(need.values()):
                break
            # Over-ask: some samples are unfinished, too short, repeated or filtered out (a
            # pass costs max_prompt_tokens steps whatever its batch, so ask for plenty).
            wanted = [(k, rng.choice(self._openers(k))) for k, c in need.items()
                      for _ in range(2 * c)]
            for made in self._sample(wanted, rng, gen):
                if made is None or not need.get(made.source) or not self.usable(made):
                    continue
                key = prompt_key(made.text)
                if key in seen or key in keys_here:
                    continue
                keys_here.add(key)
                seen.add(key)
                out.append(made)
                need[made.source] -= 1
        short = n - len(out)
        fill = [p for pool in self.listed.values() for p in pool]
        if short > 0 and fill:  # the target wrote too few usable prompts: top up from lists
            out += rng.sample(fill, min(short, len(fill)))
        return out


def generate_prompts(model: Any, tokenizer: Any, n: int, seed: int, mix: dict[str, float],
                     evaluation: EvalFilter | None = None, batch: int = 32,
                     **kw: Any) -> list[Prompt]:
    """The prompt-generation stage alone: ``n`` prompts of the mix (sampled ones distinct)."""
    maker = PromptMaker(model, tokenizer, mix, evaluation or EvalFilter(), **kw)
    gen = torch.Generator(model.device).manual_seed(seed)
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[Prompt] = []
    while len(out) < n:
        out += maker.make(min(batch, n - len(out)), rng, gen, seen)
    return out[:n]


# ---------------------------------------------------------------- shards


def shard_path(folder: Path, index: int) -> Path:
    return folder / f"shard_{index:05d}.pt"


def manifest_path(folder: Path, index: int) -> Path:
    return folder / f"shard_{index:05d}.json"


def done_shards(folder: Path) -> int:
    """Shards 0 .. n-1 complete (with a manifest); a gap ends the count."""
    n = 0
    while manifest_path(folder, n).is_file() and shard_path(folder, n).is_file():
        n += 1
    return n


def manifests(folder: Path) -> list[dict[str, Any]]:
    """Manifests of every complete shard under ``folder`` (recursively, in path order)."""
    out = []
    for path in sorted(Path(folder).rglob("shard_*.json")):
        if path.with_suffix(".pt").is_file():
            out.append(json.loads(path.read_text(encoding="utf-8")))
    return out


def load_teacher_dir(folder: Path) -> list[TeacherSeq]:
    """Every sequence of every complete shard under ``folder`` (all runs of a teacher root)."""
    seqs: list[TeacherSeq] = []
    for path in sorted(Path(folder).rglob("shard_*.json")):
        shard = path.with_suffix(".pt")
        if not shard.is_file():
            continue
        for item in torch.load(shard, weights_only=True):
            seqs.append(TeacherSeq(ids=item["ids"], start=int(item["start"]),
                                   top_ids=item["top_ids"], top_lp=item["top_lp"]))
    return seqs


def hardware(model: Any) -> dict[str, Any]:
    """Where the rows came from."""
    dev = model.device
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"device": str(dev), "cpu": cpu, "cpu_count": os.cpu_count(),
                            "torch_threads": torch.get_num_threads(),
                            "torch": torch.__version__, "nice": os.nice(0)}
    if dev.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(dev)
    return info


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else ""


def run_teacher(model: Any, tokenizer: Any, folder: Path, *, rows: int, shards: int,
                batch: int, max_new_tokens: int, top_k: int, seed: int, mix: dict[str, float],
                info: dict[str, Any], evaluation: EvalFilter | None = None,
                max_prompt_tokens: int = 64, keep_unfinished: bool = False,
                log: Callable[[str], None] = print) -> int:
    """Add shards to ``folder`` until it holds ``rows`` rows or ``shards`` shards (0: no limit).

    Returns the number of shards written by this call. Resumes after the last complete shard.
    """
    folder.mkdir(parents=True, exist_ok=True)
    evaluation = evaluation or EvalFilter()
    maker = PromptMaker(model, tokenizer, mix, evaluation, max_prompt_tokens, keep_unfinished)
    eos = _eos_ids(model, tokenizer)
    pad = maker.pad
    index = done_shards(folder)
    seen: set[str] = set()
    total = 0
    for i in range(index):
        m = json.loads(manifest_path(folder, i).read_text(encoding="utf-8"))
        total += int(m["rows"])
        seen.update(prompt_key(p["text"]) for p in m["prompts"] if p["source"] in SAMPLED)
    if index:
        log(f"resuming after shard {index - 1}: {total} rows, {len(seen)} generated prompts")
    written = 0
    while (not rows or total < rows) and (not shards or index < shards):
        t0 = time.time()
        rng = random.Random(seed * 1_000_003 + index)
        gen = torch.Generator(model.device).manual_seed(seed * 1_000_003 + index)
        prompts = maker.make(batch, rng, gen, seen)
        t1 = time.time()
        encoded = [encode_prompt(tokenizer, p.text, p.chat) for p in prompts]
        temps = [ROW_TEMPERATURES[j % len(ROW_TEMPERATURES)] for j in range(len(prompts))]
        prefix = [rng.randrange(GREEDY_PREFIX_MAX) if t == 0 else 0 for t in temps]
        seqs = answer(model, encoded, temps, max_new_tokens, top_k, eos, pad, gen, prefix)
        n_rows = count_rows(seqs)
        save_shard(shard_path(folder, index), seqs)
        seconds = time.time() - t0
        manifest = {
            "shard": index, "file": shard_path(folder, index).name, "rows": n_rows,
            "sequences": len(seqs), "prompt_mix": dict(Counter(p.source for p in prompts)),
            "mix_weights": mix, "seconds": round(seconds, 2),
            "prompt_seconds": round(t1 - t0, 2), "rows_per_s": round(n_rows / seconds, 2),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "prompts": [{"text": p.text, "chat": p.chat, "source": p.source} for p in prompts],
            "eval_set_sha256": _file_hash(EVAL_HANDWRITTEN),
        } | info
        tmp = manifest_path(folder, index).with_suffix(".json.tmp")
        tmp.write_text(json.dumps(manifest, ensure_ascii=False, indent=1), encoding="utf-8")
        tmp.replace(manifest_path(folder, index))  # the shard counts from here on
        total += n_rows
        log(f"shard {index}: {n_rows} rows in {seconds:.0f} s ({n_rows / seconds:.1f} rows/s, "
            f"prompts {t1 - t0:.0f} s); {total} rows in all; mix "
            f"{dict(Counter(p.source for p in prompts))}")
        index += 1
        written += 1
    return written


def answer(model: Any, encoded: list[list[int]], temps: list[float], max_new_tokens: int,
           top_k: int, eos: set[int], pad: int, gen: torch.Generator,
           prefix: list[int]) -> list[TeacherSeq]:
    """The target's answers and top-k rows (a seam for tests)."""
    return sample_batch(model, encoded, temps, max_new_tokens, top_k, eos, pad, gen, None,
                        prefix)


# ---------------------------------------------------------------- command


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="specviz distill teacher",
        description="Collect teacher rows (target-written prompts and answers) in resumable "
                    "shards; run the same command again to continue. Train on them with "
                    "`specviz distill --teacher-dir DIR`.")
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--run", default="general-1", help="run name (a folder under --root)")
    root = cache_root() / "teacher"
    p.add_argument("--root", default=str(root), help=f"where runs live (default {root})")
    p.add_argument("--out", help="the run folder itself (overrides --root/--run)")
    p.add_argument("--rows", type=int, default=0, help="stop at this many rows (0: never)")
    p.add_argument("--shards", type=int, default=0, help="stop at this many shards (0: never)")
    p.add_argument("--gen-batch", type=int, default=32, help="prompts answered per shard")
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--max-prompt-tokens", type=int, default=64,
                   help="longest user turn the target may write")
    p.add_argument("--keep-unfinished", action="store_true",
                   help="keep user turns cut at --max-prompt-tokens (default: drop them)")
    p.add_argument("--top-k", type=int, default=64)
    p.add_argument("--mix", default=DEFAULT_MIX, help="prompt sources and weights")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--teacher-precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    p.add_argument("--summary", action="store_true",
                   help="print rows, prompt mix and hardware of the shards under the run "
                        "folder (or --root with --run '') and exit")
    p.add_argument("--prompts-only", type=int, default=0, metavar="N",
                   help="only write N prompts (one per line) to <run>/prompts.txt")
    args = p.parse_args(argv)
    try:
        parse_mix(args.mix)
    except ValueError as exc:
        p.error(str(exc))
    return args


def run_folder(args: argparse.Namespace) -> Path:
    return Path(args.out).expanduser() if args.out else Path(args.root).expanduser() / args.run


# Settings a resumed run must share with the shards already written.
FIXED = ("target", "gen_batch", "max_new_tokens", "max_prompt_tokens", "keep_unfinished",
         "top_k", "mix", "seed", "teacher_precision")


def main(argv: list[str]) -> int:
    """Entry point of ``specviz distill teacher``."""
    import signal
    import threading

    args = parse_args(argv)
    folder = run_folder(args)
    if args.summary:
        print(json.dumps(summary(folder), indent=1, ensure_ascii=False))
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    settings = {k: getattr(args, k) for k in FIXED}
    run_file = folder / RUN_FILE
    if run_file.is_file() and not args.prompts_only:
        old = json.loads(run_file.read_text(encoding="utf-8"))["settings"]
        differ = [k for k in FIXED if k in old and old[k] != settings[k]]
        if differ:
            print(f"specviz distill teacher: error: {folder} holds a run with other settings "
                  f"({', '.join(f'{k}={old[k]!r}' for k in differ)}); use another --run.",
                  file=sys.stderr)
            return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    from specviz.core.errors import SpecvizError
    from specviz.core.models import load_model

    def log(msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)

    try:
        loaded = load_model(args.target, device=args.device, dtype="float32")
    except SpecvizError as exc:
        print(f"specviz distill teacher: error: {exc}", file=sys.stderr)
        return 2
    model, tokenizer = loaded.model, loaded.tokenizer
    if args.teacher_precision == "bf16":
        model = model.to(torch.bfloat16)
    model.eval()
    mix = parse_mix(args.mix)
    command = "specviz distill teacher " + shlex.join(argv)
    if args.prompts_only:
        prompts = generate_prompts(model, tokenizer, args.prompts_only, args.seed, mix,
                                   batch=args.gen_batch, max_prompt_tokens=args.max_prompt_tokens,
                                   keep_unfinished=args.keep_unfinished)
        out = folder / "prompts.txt"
        out.write_text("".join(p.text.replace("\n", " ") + "\n" for p in prompts
                               if p.chat), encoding="utf-8")
        log(f"{len(prompts)} prompts ({dict(Counter(p.source for p in prompts))}) -> {out}")
        return 0
    if not run_file.is_file():
        run_file.write_text(json.dumps({"settings": settings, "command": command},
                                       indent=1), encoding="utf-8")
    info = {"target": loaded.name, "teacher_precision": args.teacher_precision,
            "top_k": args.top_k, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
            "command": command, "hardware": hardware(model)}
    previous = signal.getsignal(signal.SIGTERM)
    main_thread = threading.current_thread() is threading.main_thread()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if main_thread:  # SIGTERM (a session ending) stops cleanly, like Ctrl-C
        signal.signal(signal.SIGTERM, on_term)
    try:
        run_teacher(model, tokenizer, folder, rows=args.rows, shards=args.shards,
                    batch=args.gen_batch, max_new_tokens=args.max_new_tokens, top_k=args.top_k,
                    seed=args.seed, mix=mix, info=info, max_prompt_tokens=args.max_prompt_tokens,
                    keep_unfinished=args.keep_unfinished, log=log)
    except KeyboardInterrupt:
        log(f"interrupted: {done_shards(folder)} complete shards in {folder}; run the same "
            "command to resume")
        return 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    log(f"done: {done_shards(folder)} shards in {folder}")
    return 0


def summary(folder: Path) -> dict[str, Any]:
    """Rows, sequences, prompt mix and hardware over every shard under ``folder``."""
    ms = manifests(folder)
    mix: Counter[str] = Counter()
    hw: Counter[str] = Counter()
    for m in ms:
        mix.update(m["prompt_mix"])
        h = m.get("hardware", {})
        hw[f"{h.get('gpu') or h.get('cpu')} ({m.get('teacher_precision')})"] += int(m["rows"])
    return {"shards": len(ms), "rows": sum(int(m["rows"]) for m in ms),
            "sequences": sum(int(m["sequences"]) for m in ms), "prompt_mix": dict(mix),
            "rows_by_hardware": dict(hw)}


def iter_prompts(folder: Path) -> Iterator[dict[str, Any]]:
    """Every prompt recorded in the manifests under ``folder``."""
    for m in manifests(folder):
        yield from m["prompts"]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
