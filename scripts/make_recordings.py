"""Make the example recordings in assets/recordings with the bundled pair (no GUI needed).

    python scripts/make_recordings.py [--out assets/recordings] [--only race]

Each file is JSON lines, replayable with File → Open recording (or ``specviz --replay``):
- normal.jsonl: one speculative run of the default prompt;
- race.jsonl: a race (speculative, then the target alone; same prompt, seed and settings);
- low-acceptance.jsonl: a prompt where the draft is often refused;
- rejections-t1.5.jsonl: T = 1.5, many rejections and resamples.
Timings are measured on the machine that runs this; pause other heavy work first.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specviz.core.engine import SpeculativeDecoder, chat_prompt, guarded  # noqa: E402
from specviz.core.events import Settings, to_json  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, DEFAULT_PROMPT, PRESETS, load_pair  # noqa: E402
from specviz.core.race import run_race  # noqa: E402

DEMO = Settings(k=4, temperature=0.0, max_new_tokens=48, seed=0, drafter="model",
                k_policy="fixed", lookup_k=10)
LOW_ACCEPTANCE = "Write a haiku about quantum chromodynamics, then explain it in French."
RECORDINGS = {
    "normal": (DEFAULT_PROMPT, replace(DEMO, temperature=0.7, top_p=0.9)),
    "race": (DEFAULT_PROMPT, DEMO),
    "low-acceptance": (LOW_ACCEPTANCE, replace(DEMO, temperature=0.7, top_p=0.9)),
    "rejections-t1.5": (DEFAULT_PROMPT, replace(DEMO, temperature=1.5)),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "recordings")
    parser.add_argument("--only", choices=list(RECORDINGS), action="append")
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: steadier timings on a shared machine)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    pair = load_pair(*PRESETS[DEFAULT_PAIR])
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or list(RECORDINGS):
        prompt, settings = RECORDINGS[name]
        if args.max_new_tokens:
            settings = replace(settings, max_new_tokens=args.max_new_tokens)
        text = chat_prompt(pair.tokenizer, prompt)
        events = list(run_race(pair, settings, text) if name == "race" else
                      guarded(SpeculativeDecoder(pair, settings).run(text)))
        path = args.out / f"{name}.jsonl"
        path.write_text("".join(to_json(e) + "\n" for e in events), encoding="utf-8")
        print(f"{path}: {len(events)} events", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
