"""The cross-tokenizer drafter on real weights, side by side with the model drafter, one run.

    .venv/bin/python benchmarks/cross_tokenizer.py [--prompts 4] [--max-new-tokens 48]
        [--temperatures 0,0.7] [--k 4]

No second model family's weights are on this machine, so the pair is the bundled one (the
distilled SmolLM2-135M draft for the bundled SmolLM2-135M target) read two ways:
- "model": the model drafter as always, the draft reading the target's ids through its
  reduced-vocabulary map (specviz_vocab.json; a target id outside it reaches the draft as
  its OOV id);
- "cross-tokenizer": the draft with a tokenizer of its own, built here from the target's: its
  16,384 strings under the draft's own ids and only the merges among them. The draft then
  reads the text re-tokenised its way (never an OOV id) and proposes over the strings both
  vocabularies share; verification is in the target's vocabulary.
For each prompt and temperature, interleaved: the target alone, then each drafter at fixed K.
Printed: α = P(kept | tested), tokens per round, tokens/s and its ratio to the target alone,
the share of generated tokens outside the shared vocabulary, and at T = 0 whether each text
is the target alone's (it must be: both drafters are exact). On a shared machine only the
ratios within one run mean anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder, chat_prompt  # noqa: E402
from specviz.core.events import RunFinished, Settings  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, ModelPair, load_pair  # noqa: E402
from specviz.distill.prompts import free_prompts, heldout_prompts  # noqa: E402


def own_tokenizer(target_tok: Any, ids: list[int]) -> Any:
    """The target's tokenizer cut to ``ids`` (draft id i = target id ids[i]): those strings
    under the draft's ids and the merges whose parts and result are all among them."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(target_tok.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    by_id = {i: s for s, i in vocab.items()}
    local = {by_id[t]: i for i, t in enumerate(ids) if t in by_id}
    spec["model"]["vocab"] = local
    spec["model"]["merges"] = [m for m in spec["model"]["merges"]
                               if m[0] in local and m[1] in local and m[0] + m[1] in local]
    spec["added_tokens"] = [dict(a, id=local[a["content"]]) for a in spec["added_tokens"]
                            if a["content"] in local]
    specials = {k: getattr(target_tok, k) for k in ("bos_token", "eos_token", "unk_token",
                                                    "pad_token")
                if getattr(target_tok, k) is not None and getattr(target_tok, k) in local}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
                                  **specials)
    tok.chat_template = target_tok.chat_template
    return tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--temperatures", default="0,0.7")
    ap.add_argument("--k", type=int, default=4)
    args = ap.parse_args()

    pair = load_pair(*PRESETS[DEFAULT_PAIR], device="cpu")
    assert pair.draft_vocab_map is not None
    draft_tok = own_tokenizer(pair.tokenizer, pair.draft_vocab_map.tolist())
    cross = ModelPair(target=pair.target, tokenizer=pair.tokenizer, draft=pair.draft,
                      target_name=pair.target_name, draft_name=pair.draft_name,
                      draft_tokenizer=draft_tok)
    vocab = cross.shared_vocab
    assert vocab is not None
    print(f"# shared vocabulary: {vocab.size:,} of the target's {vocab.target_size:,} tokens "
          f"(the draft's own tokenizer: {len(draft_tok.get_vocab()):,} strings)")
    prompts = (heldout_prompts()[: (args.prompts + 1) // 2]
               + free_prompts()[: args.prompts // 2])
    rows = {"model": (pair, "model"), "cross-tokenizer": (cross, "cross-tokenizer")}
    for temperature in (float(t) for t in args.temperatures.split(",")):
        totals: dict[str, list[float]] = {n: [0, 0, 0, 0, 0.0, 0, 0] for n in
                                          ["target alone", *rows]}
        for j, (user, chat) in enumerate(prompts):
            prompt = chat_prompt(pair.tokenizer, user) if chat else user
            s = Settings(k=args.k, temperature=temperature, max_new_tokens=args.max_new_tokens,
                         seed=j, k_policy="fixed", drafter="model", top_n=1)
            base = [e for e in AutoregressiveDecoder(pair, s).run(prompt)
                    if isinstance(e, RunFinished)][0]
            t = totals["target alone"]
            t[0] += base.summary.tokens
            t[4] += base.summary.wall_time_s
            for name, (p, drafter) in rows.items():
                run = [e for e in SpeculativeDecoder(p, Settings(**{
                    **s.__dict__, "drafter": drafter})).run(prompt)
                    if isinstance(e, RunFinished)][0]
                t = totals[name]
                sm = run.summary
                t[0] += sm.tokens
                t[1] += sm.accepted
                t[2] += sm.tested
                t[3] += sm.rounds
                t[4] += sm.wall_time_s
                t[5] += int(temperature == 0 and run.generated_ids == base.generated_ids)
                t[6] += vocab.report(run.generated_ids, recent=10**9).outside
        base_rate = totals["target alone"][0] / totals["target alone"][4]
        print(f"\n## T = {temperature:g}, K = {args.k} fixed, {len(prompts)} prompts, "
              f"{args.max_new_tokens} tokens each")
        print("| drafter | α | tokens/round | tok/s | ÷ target alone | outside shared | "
              "same text as target alone |")
        print("|---|---|---|---|---|---|---|")
        for name, t in totals.items():
            rate = t[0] / t[4]
            if name == "target alone":
                print(f"| {name} | | 1 | {rate:.1f} | 1.00 | | |")
                continue
            same = f"{int(t[5])}/{len(prompts)}" if temperature == 0 else "(T > 0)"
            print(f"| {name} | {t[1] / max(t[2], 1):.3f} | {t[0] / max(t[3], 1):.2f} | "
                  f"{rate:.1f} | {rate / base_rate:.2f} | {100 * t[6] / max(t[0], 1):.1f}% | "
                  f"{same} |")


if __name__ == "__main__":
    main()
