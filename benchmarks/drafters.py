"""Drafters × K policies on the bundled pair, side by side in one run, against the target alone.

    .venv/bin/python benchmarks/drafters.py [--sets grounded,template,free] [--prompts 4]
        [--temperatures 0,1] [--max-new-tokens 64] [--combos model:fixed,lookup:cost:6,...]
        [--device auto|cpu|cuda|mps] [--dtype auto|fp32|fp16|bf16]

(``model:cost-upfront``: the cost policy choosing K before drafting, its confidence stop off;
``…-stock`` after any policy: the draft model on transformers' forward instead of FastLlama.)

For each prompt, interleaved (so a drifting machine load hits every row alike): the target
alone (specviz's AutoregressiveDecoder), every drafter × K policy, and at T = 0 transformers'
plain greedy ``generate`` and ``generate(prompt_lookup_num_tokens=10)``, on CUDA also
``generate(cache_implementation="static")``, which transformers compiles (``torch.compile``,
reduce-overhead: CUDA graphs); a row that fails prints one line and is dropped. Every row runs
on ``--device``. Per set and temperature it prints α = P(kept | tested), tokens per round,
the tokens/s of each row (all prompts' tokens over all their time), the geometric mean and
the minimum over prompts of tokens/s ÷ the target alone's, the time spent outside model
forward passes as a share of wall time, and at T = 0 how many prompts gave the target
alone's text ("same"). A background teacher (specviz-teacher) is paused
while it runs; pause any other CPU work first: on a shared machine only the ratios mean
anything.

transformers' assisted generation is not run with the bundled draft: its vocabulary is a
subset of the target's (specviz_vocab.json), which ``assistant_model`` cannot map.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from draft_quality import teacher_paused  # noqa: E402
from grounded_prompts import grounded_prompts  # noqa: E402

from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder, chat_prompt  # noqa: E402
from specviz.core.events import RunFinished, Settings  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, ModelPair, load_pair  # noqa: E402
from specviz.core.options import DEFAULTS  # noqa: E402
from specviz.core.policy import CostPolicy  # noqa: E402
from specviz.core.tally import Tally  # noqa: E402
from specviz.distill.prompts import free_prompts, heldout_prompts  # noqa: E402

SETS = {"grounded": grounded_prompts, "template": heldout_prompts, "free": free_prompts}
ALL_COMBOS = [f"{d}:{p}" for d in ("model", "lookup", "hybrid")
              for p in ("fixed", "heuristic", "cost")]
UPFRONT = "-upfront"  # a policy suffix: "model:cost-upfront" is the cost policy without its stop
STOCK = "-stock"  # a policy suffix, last: the draft model on transformers' forward (no FastLlama)


@dataclass
class Row:
    """One configuration over a set of prompts: its tally and per-prompt speed ratios."""

    tally: Tally = field(default_factory=Tally)
    ratios: list[float] = field(default_factory=list)
    mismatches: int = 0
    compared: int = 0  # prompts checked against the target alone's text (T = 0)

    def line(self, name: str) -> str:
        t = self.tally
        geo = math.exp(statistics.fmean(math.log(r) for r in self.ratios)) if self.ratios else 0
        alpha = f"{t.alpha:5.2f}" if t.tested else "    -"
        per_round = f"{t.mean_tokens_per_round:5.2f}" if t.rounds else "    -"
        overhead = f"{100 * t.overhead_share:5.1f}%" if t.forward_time_s else "     -"
        worst = min(self.ratios) if self.ratios else 0.0
        tps = f"{t.tokens / t.wall_time_s:7.1f}" if t.wall_time_s else "      -"
        same = f"{self.compared - self.mismatches}/{self.compared}" if self.compared else "-"
        return (f"  {name:<26} {alpha}  {per_round}  {tps}  {geo:6.2f}x  {worst:6.2f}x  "
                f"{overhead}  {same:>5}")


def run_specviz(decoder: AutoregressiveDecoder | SpeculativeDecoder, prompt: str
                ) -> tuple[float, RunFinished]:
    t0 = time.perf_counter()
    *_, done = decoder.run(prompt)
    wall = time.perf_counter() - t0
    assert isinstance(done, RunFinished), done
    return wall, done


HF_GREEDY, HF_LOOKUP, HF_STATIC = "hf greedy", "hf prompt lookup 10", "hf static compiled"
# The static cache sized once for every prompt (a new size would compile again).
STATIC_CACHE_LEN = 1024


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so a clock read after it counts it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def run_hf(pair: ModelPair, prompt: str, max_new: int, row: str) -> tuple[float, list[int]]:
    """transformers' greedy ``generate`` on the pair's device: plain, prompt lookup (10), or
    with a static cache (compiled by transformers on CUDA)."""
    ids = pair.tokenizer(prompt, return_tensors="pt", add_special_tokens=True)["input_ids"]
    ids = ids.to(pair.device)
    extra: dict[str, object] = {}
    if row == HF_LOOKUP:
        extra["prompt_lookup_num_tokens"] = 10
    elif row == HF_STATIC:
        extra.update(cache_implementation="static", max_cache_len=STATIC_CACHE_LEN)
    sync(pair.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = pair.target.generate(ids, do_sample=False, max_new_tokens=max_new,
                                   pad_token_id=pair.tokenizer.eos_token_id, **extra)
    sync(pair.device)
    return time.perf_counter() - t0, [int(i) for i in out[0, ids.shape[1]:]]


def hf_rows(pair: ModelPair, warm: str, enabled: bool) -> list[str]:
    """transformers' rows that run here: each warmed once (the static one compiles then); a
    row that fails says so in one line and is left out."""
    if not enabled:
        return []
    rows = [HF_GREEDY, HF_LOOKUP] + ([HF_STATIC] if pair.device.type == "cuda" else [])
    working = []
    for row in rows:
        try:
            run_hf(pair, warm, 8, row)
            working.append(row)
        except Exception as exc:  # noqa: BLE001 - a missing compiler etc.: one line, no row
            print(f"# {row}: left out ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")
    if pair.device.type != "cuda":
        print(f"# {HF_STATIC}: CUDA only (transformers compiles generate on CUDA)")
    return working


def lookup_alpha_by_match(pair: ModelPair, sets: list[str], n_prompts: int, max_new: int,
                          k: int) -> None:
    """Timing-free, T = 0: α of lookup proposals by their plan's key (the match length; for
    long matches how far they really run back), next to the model's α.

    The target's greedy text is the reference; at every position, lookup (n = 1..4) proposes
    up to K tokens and, at T = 0, keeps the longest prefix that agrees with that text.
    """
    from specviz.core.drafters import LookupDrafter
    from specviz.core.rng import TorchRandom

    tok = pair.tokenizer
    kept: dict[str, int] = {}
    tested: dict[str, int] = {}
    model = Tally()
    for set_name in sets:
        for text, chat in SETS[set_name]()[:n_prompts]:
            prompt = chat_prompt(tok, text) if chat else text
            s = Settings(k=k, temperature=0, max_new_tokens=max_new, drafter="model",
                         k_policy="fixed", lookup_k=10)
            _, ref = run_specviz(AutoregressiveDecoder(pair, s), prompt)
            _, spec = run_specviz(SpeculativeDecoder(pair, s), prompt)
            model.add_summary(spec.summary)
            prompt_ids = [int(i) for i in tok(prompt, add_special_tokens=True)["input_ids"]]
            gen = list(ref.generated_ids)
            lookup = LookupDrafter(pair.vocab_size, 1, 4)
            for t in range(len(gen) - 1):
                context = prompt_ids + gen[:t]
                plan = lookup.plan(context)
                if not plan.match:
                    continue
                proposal = lookup.propose(context, k, TorchRandom(0)).tokens
                n_ok = 0
                while n_ok < len(proposal) and t + n_ok < len(gen) and \
                        proposal[n_ok] == gen[t + n_ok]:
                    n_ok += 1
                kept[plan.key] = kept.get(plan.key, 0) + n_ok
                tested[plan.key] = tested.get(plan.key, 0) + min(len(proposal), n_ok + 1)
    print(f"\nα at T = 0 ({', '.join(sets)}; {n_prompts} prompts each): model draft "
          f"{model.alpha:.2f} over {model.tested} tested drafts")
    for key in sorted(tested, key=lambda k: int(k.split(":")[1])):
        print(f"  {key}: α {kept[key] / tested[key]:.2f} over {tested[key]} tested")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="grounded,template,free")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per set")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4, help="K of fixed, start of heuristic and cost")
    ap.add_argument("--lookup-k", type=int, default=DEFAULTS["lookup_k"],
                    help="most tokens a lookup round drafts (fixed and heuristic draft it, cost "
                    "caps its choice there); the CLI's and the app's default")
    ap.add_argument("--combos", default=",".join(ALL_COMBOS))
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' generate rows")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "mps"),
                    help="where every row runs (specviz's and transformers')")
    ap.add_argument("--dtype", default="auto", help="auto (the bundled pair: fp32), fp16, ...")
    ap.add_argument("--lookup-alpha", action="store_true",
                    help="only the timing-free α of lookup by match length (hybrid's rule)")
    ap.add_argument("--no-pause-teacher", action="store_true",
                    help="leave a background teacher (specviz-teacher) running")
    args = ap.parse_args()
    with teacher_paused(not args.no_pause_teacher):
        run(args)


def run(args: argparse.Namespace) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair(*PRESETS[DEFAULT_PAIR], device=args.device, dtype=args.dtype)
    tok = pair.tokenizer
    if args.lookup_alpha:
        lookup_alpha_by_match(pair, args.sets.split(","), args.prompts, args.max_new_tokens,
                              args.k)
        return
    # drafter:policy, or drafter:policy:lookup_k to set lookup's budget for that row alone.
    combos = [(c.split(":") + [str(args.lookup_k)])[:3] for c in args.combos.split(",")]
    stock_env = os.environ.get("SPECVIZ_STOCK_FORWARD", "0")

    def row_name(d: str, p: str, lk: str) -> str:
        return f"{d} {p}" + (f" lk{lk}" if lk != str(args.lookup_k) else "")

    device = pair.device
    gpu = f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""
    print(f"# {DEFAULT_PAIR} on {device}{gpu}, {str(pair.dtype).removeprefix('torch.')}, torch "
          f"{torch.__version__}; {args.prompts} prompts per set, {args.max_new_tokens} new "
          f"tokens, K {args.k}, lookup K {args.lookup_k}, torch threads "
          f"{torch.get_num_threads()}")
    # Warm-up (first forwards allocate), not counted.
    warm = chat_prompt(tok, "Hello")
    plain = Settings(temperature=0, max_new_tokens=8, drafter="model", k_policy="fixed",
                     lookup_k=10)
    run_specviz(AutoregressiveDecoder(pair, plain), warm)
    run_specviz(SpeculativeDecoder(pair, plain), warm)
    # The cost policy times the target's passes once per pair (~1.5 s, engine.verify_costs):
    # done here, so no row's first prompt pays it (a one-off CLI run does).
    run_specviz(SpeculativeDecoder(pair, Settings(temperature=0, max_new_tokens=8,
                                                  k_policy="cost", drafter="model",
                                                      lookup_k=10)), warm)
    hf_names = hf_rows(pair, warm, not args.no_hf and "0" in
                       [f"{float(t):g}" for t in args.temperatures.split(",")])

    for temperature in (float(t) for t in args.temperatures.split(",")):
        for set_name in args.sets.split(","):
            prompts = [chat_prompt(tok, text) if chat else text
                       for text, chat in SETS[set_name]()[:args.prompts]]
            rows: dict[str, Row] = {"target alone": Row()}
            rows.update({row_name(d, p, lk): Row() for d, p, lk in combos})
            hf = list(hf_names) if temperature == 0 else []
            rows.update({name: Row() for name in hf})
            t_start = time.perf_counter()
            for i, prompt in enumerate(prompts):
                base = Settings(k=args.k, lookup_k=args.lookup_k, temperature=temperature,
                                max_new_tokens=args.max_new_tokens, seed=i, drafter="model",
                                    k_policy="fixed")
                # Every configuration runs once per prompt, in an order rotated per prompt so
                # that warm-up and drifting load do not always favour the same row.
                jobs: list[tuple[str, object]] = [("target alone", base)]
                jobs += [(row_name(d, p, lk), Settings(**{
                    **base.__dict__, "drafter": d,
                    "k_policy": p.removesuffix(STOCK).removesuffix(UPFRONT),
                    "lookup_k": int(lk)})) for d, p, lk in combos]
                jobs += [(name, None) for name in hf if name in hf_names]
                shift = i % len(jobs)
                results: dict[str, tuple[float, list[int], RunFinished | None]] = {}
                for name, job in jobs[shift:] + jobs[:shift]:
                    if name.startswith("hf "):
                        try:
                            w, ids = run_hf(pair, prompt, args.max_new_tokens, name)
                        except Exception as exc:  # noqa: BLE001 - one line, the row dropped
                            print(f"# {name}: dropped ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0][:160]})", flush=True)
                            hf_names.remove(name)
                            rows.pop(name)
                            continue
                        results[name] = (w, ids, None)
                    else:
                        assert isinstance(job, Settings)
                        decoder = (AutoregressiveDecoder(pair, job) if name == "target alone"
                                   else SpeculativeDecoder(pair, job))
                        # "cost-upfront": the cost policy sizing K before drafting, as it did
                        # before its confidence stop; "-stock": the draft on transformers'
                        # forward, not FastLlama.
                        CostPolicy.CONFIDENCE_STOP = UPFRONT not in name
                        os.environ["SPECVIZ_STOCK_FORWARD"] = "1" if STOCK in name else "0"
                        w, done = run_specviz(decoder, prompt)
                        CostPolicy.CONFIDENCE_STOP = True
                        os.environ["SPECVIZ_STOCK_FORWARD"] = stock_env
                        results[name] = (w, list(done.generated_ids), done)
                wall, ref_ids, _ = results["target alone"]
                base_tps = len(ref_ids) / wall
                for name, (w, ids, done) in results.items():
                    row = rows[name]
                    row.ratios.append(len(ids) / w / base_tps)
                    if done is not None:
                        row.tally.add_summary(done.summary)
                    else:
                        row.tally.tokens += len(ids)
                        row.tally.wall_time_s += w
                    # EOS may end one side earlier: compare what both produced.
                    n = min(len(ids), len(ref_ids))
                    if temperature == 0:
                        row.compared += 1
                        row.mismatches += ids[:n] != ref_ids[:n]
                print(f"# {set_name} T={temperature:g} prompt {i + 1}/{len(prompts)} done",
                      file=sys.stderr, flush=True)
            print(f"\n{set_name}, T = {temperature:g} ({len(prompts)} prompts, "
                  f"{time.perf_counter() - t_start:.0f} s)")
            print(f"  {'':<26} {'α':>5}  {'tok/r':>5}  {'tok/s':>7}  {'geomean':>7}  "
                  f"{'worst':>7}  overhead   same")
            for name, row in rows.items():
                print(row.line(name), flush=True)
            if HF_GREEDY in rows and HF_LOOKUP in rows:
                g, lk = rows[HF_GREEDY].ratios, rows[HF_LOOKUP].ratios
                geo = math.exp(statistics.fmean(math.log(b / a) for a, b in zip(g, lk,
                                                                                 strict=True)))
                print(f"  transformers' prompt lookup over its own greedy: {geo:.2f}x")


if __name__ == "__main__":
    main()
