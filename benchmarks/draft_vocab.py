"""Would a larger draft vocabulary pay? (issue 11) Share of the target's output outside it, and
the cost of its output head.

    PYTHONPATH=. .venv/bin/python benchmarks/draft_vocab.py [--teacher-dir DIR] [--cost]

1. The target answers the hand-written evaluation set (assets/prompts/eval_handwritten.txt)
   and FREE_PROMPTS at T = 0 and T = 1 (--max-new-tokens, batched, the target's top-64 kept).
   Measurement only: nothing is written where a training run reads.
2. For each vocabulary size (--sizes) and ranking: the share of output tokens outside the
   vocabulary (each a sure rejection) and the target mass on ids outside it (a lower bound:
   only the top-64 ids are seen). Rankings: the shipped draft's ids extended by teacher mass of
   --teacher-dir's shards; teacher mass alone (what `specviz distill --teacher-dir` would pick);
   BPE rank (the lowest ids, a corpus-frequency proxy needing no data).
3. --cost: one cached single-token forward of draft-shaped models with each size of head, full
   and low-rank (--rank), over the target's (interleaved, medians). Pauses a running teacher
   (`pkill -STOP -f specviz-teacher`) while it times, and says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.core.models import (  # noqa: E402
    BUNDLED_DRAFT_DIR,
    VOCAB_MAP_FILE,
    cache_root,
    load_pair,
)
from specviz.distill.data import TeacherSeq, _eos_ids, encode_prompt, sample_batch  # noqa: E402
from specviz.distill.prompts import FREE_PROMPTS, handwritten_prompts  # noqa: E402


def target_rows(pair: Any, max_new: int) -> dict[str, list[TeacherSeq]]:
    """The target's answers (with top-64 rows) on both hand-written sets, T = 0 and T = 1."""
    eos = _eos_ids(pair.target, pair.tokenizer)
    pad = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else min(eos)
    out: dict[str, list[TeacherSeq]] = {}
    sets = {"handwritten": [t for t, _ in handwritten_prompts()], "free": list(FREE_PROMPTS)}
    for name, prompts in sets.items():
        enc = [encode_prompt(pair.tokenizer, t, True) for t in prompts]
        for temp in (0.0, 1.0):
            seqs: list[TeacherSeq] = []
            for i in range(0, len(enc), 16):
                seqs += sample_batch(pair.target, enc[i:i + 16], [temp] * len(enc[i:i + 16]),
                                     max_new, 64, eos, pad, torch.Generator().manual_seed(0))
            out[f"{name} T={temp:g}"] = seqs
    return out


def teacher_mass(seqs: list[TeacherSeq], full: int) -> torch.Tensor:
    """Teacher probability mass per id (+ a little per sampled token), as choose_vocab ranks."""
    mass = torch.zeros(full, dtype=torch.float64)
    for s in seqs:
        mass.index_add_(0, s.top_ids.reshape(-1).long(),
                        s.top_lp.float().exp().reshape(-1).double())
        mass.index_add_(0, s.ids.long(), torch.full((s.ids.numel(),), 1e-3,
                                                    dtype=torch.float64))
    return mass


def outside(vocab: list[int], rows: dict[str, list[TeacherSeq]], full: int) -> dict[str, Any]:
    """Per set: (share of output tokens outside, target top-64 mass outside)."""
    kept = torch.zeros(full, dtype=torch.bool)
    kept[torch.tensor(vocab, dtype=torch.long)] = True
    res = {}
    for key, seqs in rows.items():
        n = sum(int(s.ids.numel()) - s.start for s in seqs)
        out_tok = sum(int((~kept[s.ids[s.start:].long()]).sum()) for s in seqs)
        nr = sum(int(s.top_ids.shape[0]) for s in seqs)
        p = [s.top_lp.float().exp() for s in seqs]
        lost = sum(float((pi * ~kept[s.top_ids.long()]).sum()) for pi, s in zip(p, seqs,
                                                                                  strict=True))
        res[key] = (out_tok / max(n, 1), lost / max(nr, 1))
    return res


def head_cost(pair: Any, sizes: list[int], rank: int, pause: bool) -> list[tuple[str, float,
                                                                               float, float]]:
    """(label, params M, ms, ratio to the target) per model, one cached token each."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine_speed import forward_cost
    from transformers import LlamaConfig, LlamaForCausalLM

    def make(v: int, r: int = 0) -> Any:
        cfg = LlamaConfig(**{**pair.draft.config.to_dict(), "vocab_size": v})
        torch.manual_seed(0)
        m = LlamaForCausalLM(cfg).eval()
        if r:
            m.config.tie_word_embeddings = False
            m.lm_head = torch.nn.Sequential(torch.nn.Linear(cfg.hidden_size, r, bias=False),
                                            torch.nn.Linear(r, v, bias=False))
        return m

    models = {"target": pair.target, "shipped draft": pair.draft}
    for v in sizes:
        models[f"draft, {v}-id full head"] = make(v)
    for v in sizes[1:]:
        models[f"draft, {v}-id low-rank head (r={rank})"] = make(v, rank)
    ids = torch.randint(0, min(sizes), (1, 120))
    times: dict[str, list[float]] = {k: [] for k in models}
    if pause:
        subprocess.run(["pkill", "-STOP", "-f", "specviz-teacher"], check=False)
        print("# teacher paused while timing (pkill -STOP -f specviz-teacher)", flush=True)
    try:
        for _ in range(5):
            for k, m in models.items():
                times[k].append(forward_cost(m, ids, 1, reps=15))
    finally:
        if pause:
            subprocess.run(["pkill", "-CONT", "-f", "specviz-teacher"], check=False)
            print("# teacher resumed (pkill -CONT -f specviz-teacher)", flush=True)
    t = statistics.median(times["target"])
    return [(k, sum(p.numel() for p in models[k].parameters()) / 1e6,
             1000 * statistics.median(v), statistics.median(v) / t) for k, v in times.items()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher-dir", default=str(cache_root() / "teacher"),
                    help="teacher shards to rank ids by (specviz distill teacher)")
    ap.add_argument("--sizes", default="10240,16384,24576")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--cost", action="store_true", help="also time the heads")
    ap.add_argument("--rank", type=int, default=128, help="rank of the low-rank heads")
    ap.add_argument("--no-pause", action="store_true",
                    help="do not pause a running teacher while timing")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; command: "
          f"{' '.join(sys.argv)}", flush=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    pair = load_pair("smollm2-135m-draft", "smollm2-135m", device="cpu")
    full = pair.vocab_size
    results: dict[str, Any] = {"command": " ".join(sys.argv)}
    if args.cost:
        cost = head_cost(pair, sizes, args.rank, not args.no_pause)
        results["cost"] = cost
        print("| model | parameters | one cached token | ÷ target |\n|---|---|---|---|")
        for label, params, ms, ratio in cost:
            print(f"| {label} | {params:.1f}M | {ms:.2f} ms | {ratio:.3f} |", flush=True)

    t0 = time.time()
    rows = target_rows(pair, args.max_new_tokens)
    print(f"# target answers: {sum(len(v) for v in rows.values())} sequences in "
          f"{time.time() - t0:.0f} s", flush=True)
    shipped = json.loads((BUNDLED_DRAFT_DIR / VOCAB_MAP_FILE).read_text())["target_ids"]
    from specviz.distill.teacher import load_teacher_dir, summary

    folder = Path(args.teacher_dir).expanduser()
    teach = load_teacher_dir(folder) if folder.is_dir() else []
    print(f"# ids ranked on {summary(folder)['rows'] if teach else 0} teacher rows of {folder}")
    always = sorted(int(i) for i in pair.tokenizer.all_special_ids if 0 <= int(i) < full)
    mass = teacher_mass(teach, full)
    mass[torch.tensor(always)] = float("inf")
    by_mass = sorted(range(full), key=lambda i: (-float(mass[i]), i))
    in_shipped = set(shipped)
    rankings = {"shipped + teacher mass": shipped + [i for i in by_mass if i not in in_shipped],
                "teacher mass": by_mass, "BPE rank (lowest ids)": list(range(full))}
    keys = list(rows)
    print("| ranking | ids | " + " | ".join(keys) + " |\n|---|---|" + "---|" * len(keys))
    table = []
    for label, order in rankings.items():
        for size in sizes:
            r = outside(order[:size], rows, full)
            table.append({"ranking": label, "ids": size, **r})
            print(f"| {label} | {size} | " + " | ".join(f"{a:.1%} / {b:.1%}"
                                                        for a, b in (r[k] for k in keys)) + " |")
    print("cells: output tokens outside the vocabulary / target mass on ids outside it "
          "(top-64 only: a lower bound)")
    results["outside"] = table
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
