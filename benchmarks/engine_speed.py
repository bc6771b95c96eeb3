"""Engine speed, side by side in one run: target alone, specviz, transformers' assisted generate.

    .venv/bin/python benchmarks/engine_speed.py [--pairs self,random,distilled] [--k 4]
        [--device cpu|cuda|mps] [--dtype auto]

For each pair it runs, interleaved and repeated over the same prompts and settings:
  * the target alone (specviz's AutoregressiveDecoder; also plain ``generate`` as a check),
  * specviz's SpeculativeDecoder (emitting every event, top-10 per distribution),
  * ``target.generate(assistant_model=draft)`` with a constant K (no dynamic schedule).
It prints tokens/s ratios, the measured acceptance rate α, and the speedup predicted
from α, K and the measured costs (each model's pass as the engine runs it: FastLlama where
the engine takes it) next to the measured speedup. Every row runs on ``--device``. Absolute
times are printed for context only: on a shared machine only the ratios mean anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.core.drafters import CachedModel  # noqa: E402
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder, chat_prompt  # noqa: E402
from specviz.core.events import RunFinished, Settings  # noqa: E402
from specviz.core.fast_llama import serves_target  # noqa: E402
from specviz.core.models import (  # noqa: E402
    LoadedModel,
    ModelPair,
    default_draft,
    draft_id_table,
    load_model,
)
from specviz.core.tally import Tally  # noqa: E402

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "List five tips for learning a new language.",
    "Explain how a bicycle works to a child.",
]


def random_draft(target: torch.nn.Module) -> torch.nn.Module:
    """A 1-layer random Llama on the target's vocabulary: α ≈ 0, the rejection path."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = target.config  # type: ignore[attr-defined]
    config = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=cfg.max_position_embeddings,
                         bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id)
    return LlamaForCausalLM(config).eval()


def timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def forward_cost(model: torch.nn.Module, prompt_ids: torch.Tensor, n_tokens: int, fast: bool,
                 reps: int = 8) -> float:
    """Median seconds for one cached forward of ``n_tokens`` new tokens after the prompt, on
    the path the engine runs ``model`` on (``fast``: FastLlama where it can)."""
    rows = int(model.get_output_embeddings().weight.shape[0])  # type: ignore[operator]
    times = []
    with torch.inference_mode():
        lm = CachedModel(model, rows, fast=fast)
        ids = [int(i) for i in prompt_ids[0]]
        lm.feed(ids, keep=1)
        for _ in range(reps):
            sync(lm.device)
            t0 = time.perf_counter()
            lm.time_pass(n_tokens, ids[-1])
            sync(lm.device)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def last(decoder: AutoregressiveDecoder | SpeculativeDecoder, prompt: str) -> RunFinished:
    *_, done = decoder.run(prompt)
    assert isinstance(done, RunFinished)
    return done


def hf_assisted(pair: ModelPair, assistant: torch.nn.Module, ids: torch.Tensor,
                max_new: int) -> torch.Tensor:
    with torch.inference_mode():
        return pair.target.generate(ids, assistant_model=assistant, do_sample=False,  # type: ignore[no-any-return]
                                    max_new_tokens=max_new,
                                    pad_token_id=pair.tokenizer.eos_token_id)


def bench_pair(name: str, pair: ModelPair, k: int, max_new: int, reps: int) -> None:
    tok = pair.tokenizer
    settings = Settings(k=k, temperature=0.0, max_new_tokens=max_new, seed=0, drafter="model",
                        k_policy="fixed", lookup_k=10)
    prompts = [chat_prompt(tok, p) for p in PROMPTS]
    assistant = pair.draft
    assistant.generation_config.num_assistant_tokens = k  # type: ignore[union-attr]
    assistant.generation_config.num_assistant_tokens_schedule = "constant"  # type: ignore[union-attr]
    assistant.generation_config.assistant_confidence_threshold = 0.0  # type: ignore[union-attr]

    hf_ok = pair.draft_vocab_map is None
    # One Tally per row (core/tally.py: the engine's, the app's and every benchmark's counts);
    # transformers' generate has no Summary, so its row folds its tokens and time alone.
    tallies = {"target": Tally(), "specviz": Tally(), "hf_assisted": Tally()}
    mismatches = 0
    for rep in range(reps + 1):  # the first pass warms up and is not counted
        for prompt in prompts:
            ids = tok(prompt, return_tensors="pt")["input_ids"].to(pair.device)

            r_base = last(AutoregressiveDecoder(pair, settings), prompt)
            r_spec = last(SpeculativeDecoder(pair, settings), prompt)
            # transformers' assisted generate needs the draft on the target's vocabulary.
            t_hf, r_hf = (timed(lambda: hf_assisted(pair, assistant, ids, max_new))  # noqa: B023
                          if hf_ok else (0.0, ids))
            if r_spec.generated_ids != r_base.generated_ids:
                mismatches += 1
            if rep == 0:
                continue
            tallies["target"].add_summary(r_base.summary)
            tallies["specviz"].add_summary(r_spec.summary)
            tallies["hf_assisted"].tokens += int(r_hf.shape[1] - ids.shape[1])
            tallies["hf_assisted"].wall_time_s += t_hf

    tps = {key: t.tokens_per_s for key, t in tallies.items() if t.tokens}
    spec = tallies["specviz"]
    alpha = spec.alpha  # P(draft kept | tested): the formula's α
    rate = spec.acceptance_rate  # accepted ÷ drafted
    probe = tok(prompts[0], return_tensors="pt")["input_ids"]
    on_fast = serves_target(pair.target)
    t1 = forward_cost(pair.target, probe, 1, on_fast)
    tk = forward_cost(pair.target, probe, k + 1, on_fast)
    draft_probe = probe
    if pair.draft_vocab_map is not None:  # target ids -> the draft's reduced vocabulary
        draft_probe = draft_id_table(pair.draft_vocab_map, pair.vocab_size,
                                     pair.draft_oov_id)[probe]
    d1 = forward_cost(assistant, draft_probe, 1, True)  # type: ignore[arg-type]
    c = d1 / t1
    v = tk / t1
    expected_tokens = (1 - alpha ** (k + 1)) / (1 - alpha) if alpha < 1 else k + 1.0
    predicted_paper = expected_tokens / (k * c + 1)  # Leviathan et al.: verify costs one pass
    predicted_cpu = expected_tokens / (k * c + v)  # with the measured cost of K+1 positions
    print(f"\n## {name}: K={k}, temperature 0, {max_new} new tokens, "
          f"{len(prompts)} prompts x {reps}")
    hf = f"{tps['hf_assisted']:.2f}" if hf_ok else "n/a"
    print(f"  tokens/s: target alone {tps['target']:.2f}, specviz {tps['specviz']:.2f}, "
          f"HF assisted {hf}")
    print(f"  specviz / target alone      = {tps['specviz'] / tps['target']:.2f}x")
    if hf_ok:
        print(f"  HF assisted / target alone  = {tps['hf_assisted'] / tps['target']:.2f}x")
        print(f"  specviz / HF assisted       = {tps['specviz'] / tps['hf_assisted']:.2f}x")
    else:
        print("  HF assisted: n/a (this draft proposes from a reduced vocabulary)")
    print(f"  α = P(draft kept) = {alpha:.3f} (accepted ÷ drafted {rate:.3f}); "
          f"cost ratio c = draft/target forward = {c:.3f}; verify {k + 1} positions / 1 = {v:.2f}")
    print(f"  predicted speedup: {predicted_paper:.2f}x (verify = 1 pass), "
          f"{predicted_cpu:.2f}x (measured verify cost); measured "
          f"{tps['specviz'] / tps['target']:.2f}x")
    print(f"  greedy outputs differing from the target alone: {mismatches} (must be 0)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", default="self,random,distilled")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--draft", help="an extra pair: this draft with --target")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda", "mps"))
    ap.add_argument("--dtype", default="auto", help="auto (the bundled pair: fp32), fp16, ...")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} cpus; command: {' '.join(sys.argv)}")
    dev, dt = args.device, args.dtype
    target = load_model(args.target, device=dev, dtype=dt)
    print(f"# target on {next(target.model.parameters()).device}, "
          f"{next(target.model.parameters()).dtype}")
    wanted = args.pairs.split(",")
    pairs: list[tuple[str, LoadedModel]] = []
    if "self" in wanted:  # α = 1: pure overhead of drafting with a model as big as the target
        pairs.append(("target as its own draft (α = 1)", load_model(args.target, dev, dt)))
    if "random" in wanted:
        pairs.append(("random 1-layer draft (α ≈ 0)",
                      LoadedModel(random_draft(target.model).to(  # type: ignore[arg-type]
                          next(target.model.parameters()).device,
                          next(target.model.parameters()).dtype), target.tokenizer, "random")))
    if "distilled" in wanted and default_draft():
        pairs.append(("shipped distilled draft", load_model(default_draft() or "", dev, dt)))
    if args.draft:
        pairs.append((args.draft, load_model(args.draft, dev, dt)))
    for name, draft in pairs:
        pair = ModelPair(target=target.model, draft=draft.model, tokenizer=target.tokenizer,
                         target_name=target.name, draft_name=name,
                         draft_vocab_map=draft.vocab_map, draft_oov_id=draft.oov_id)
        bench_pair(name, pair, args.k, args.max_new_tokens, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
