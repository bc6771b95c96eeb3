"""Teacher data for distillation: sequences with the target's top-k next-token log-probs.

A sequence is ``ids`` (context + continuation) and ``start``: row j of ``top_ids``/``top_lp``
is p(· | ids[:start + j]), the target's distribution for the token ids[start + j].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specviz.core.models import cached_forward

from .prompts import heldout_prompts, train_prompts

# Sampling temperatures cycled over the rows of a batch: T=1 matches the distribution the
# draft must copy; greedy and cooler rows give the contexts a T=0 run will see.
ROW_TEMPERATURES = (1.0, 0.0, 0.7, 1.0)
# A greedy row first samples this many tokens at T = 1 (uniform in [0, max)), so that its
# greedy continuation differs from the other passes over the same prompt: a long run visits
# each prompt hundreds of times, and pure greedy rows would repeat one sequence.
GREEDY_PREFIX_MAX = 12

Tick = Callable[[int], None]


@dataclass
class TeacherSeq:
    """One sequence with the target's top-k log-probs for its continuation tokens."""

    ids: torch.Tensor  # (L,) int32, target ids
    start: int  # first position with a teacher row
    top_ids: torch.Tensor  # (L - start, k) int32
    top_lp: torch.Tensor  # (L - start, k) float16, log p


def encode_prompt(tokenizer: Any, text: str, chat: bool) -> list[int]:
    """Prompt ids: the chat template when asked for and available, else plain text."""
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)] or [0]


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for value in (getattr(model.config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    return ids


@torch.inference_mode()
def sample_batch(
    model: Any,
    prompts: list[list[int]],
    temperatures: list[float],
    max_new_tokens: int,
    top_k: int,
    eos_ids: set[int],
    pad_id: int,
    generator: torch.Generator,
    tick: Tick | None = None,
    sampled_prefix: list[int] | None = None,
) -> list[TeacherSeq]:
    """Sample continuations from the target, batched with left padding and a KV cache.

    Runs on the model's device; ``generator`` must live there too. Results are on the CPU.
    Row i samples its first ``sampled_prefix[i]`` tokens at T = 1, then at its temperature.
    """
    dev = model.device
    batch = len(prompts)
    width = max(len(p) for p in prompts)
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    ids, mask = ids.to(dev), mask.to(dev)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, W)
    temps = torch.tensor(temperatures, dtype=torch.float32, device=dev).unsqueeze(-1)  # (B, 1)
    eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=dev)
    prefix = torch.tensor(sampled_prefix or [0] * batch, device=dev).unsqueeze(-1)  # (B, 1)
    out, past = cached_forward(model, None, input_ids=ids, attention_mask=mask,
                               position_ids=positions)
    logits = out.logits[:, -1].float()  # (B, V)
    new_ids: list[torch.Tensor] = []
    top_ids: list[torch.Tensor] = []
    top_lp: list[torch.Tensor] = []
    done = torch.zeros(batch, dtype=torch.bool, device=dev)
    lengths = torch.full((batch,), max_new_tokens, dtype=torch.long, device=dev)
    last_pos = positions[:, -1:]
    for step in range(max_new_tokens):
        logp = torch.log_softmax(logits, dim=-1)  # (B, V): p at T = 1
        values, indices = logp.topk(top_k, dim=-1)  # (B, k)
        top_ids.append(indices.to(torch.int32))
        top_lp.append(values.to(torch.float16))
        greedy = logp.argmax(dim=-1)
        temp = torch.where(prefix > step, torch.ones_like(temps), temps)  # (B, 1)
        probs = torch.softmax(logp / temp.clamp(min=1e-4), dim=-1)
        sampled = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        token = torch.where(temp.squeeze(-1) > 0, sampled, greedy)  # (B,)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        new_ids.append(token)
        is_eos = torch.isin(token, eos)
        finished_now = is_eos & ~done
        lengths[finished_now] = step + 1
        done |= is_eos
        if tick is not None:
            tick(int((~done).sum()) + int(finished_now.sum()))
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=torch.long, device=dev)], dim=-1)
        last_pos = last_pos + 1
        out, past = cached_forward(model, past, input_ids=token.unsqueeze(-1),
                                   attention_mask=mask, position_ids=last_pos)
        logits = out.logits[:, -1].float()
    gen = torch.stack(new_ids, dim=1).cpu()  # (B, n)
    tids = torch.stack(top_ids, dim=1).cpu()  # (B, n, k)
    tlp = torch.stack(top_lp, dim=1).cpu()  # (B, n, k)
    lengths = lengths.cpu()
    seqs = []
    for row, prompt in enumerate(prompts):
        n = min(int(lengths[row]), int(gen.shape[1]))
        full = torch.cat([torch.tensor(prompt, dtype=torch.long), gen[row, :n]])
        seqs.append(TeacherSeq(ids=full.to(torch.int32), start=len(prompt),
                               top_ids=tids[row, :n].clone(), top_lp=tlp[row, :n].clone()))
    return seqs


@torch.inference_mode()
def score_text(model: Any, chunks: list[list[int]], top_k: int, batch: int) -> list[TeacherSeq]:
    """Teacher top-k at every position of plain-text chunks (one batched forward each)."""
    seqs: list[TeacherSeq] = []
    for i in range(0, len(chunks), batch):
        group = chunks[i:i + batch]
        width = max(len(c) for c in group)
        ids = torch.zeros((len(group), width), dtype=torch.long)
        for row, chunk in enumerate(group):
            ids[row, :len(chunk)] = torch.tensor(chunk)  # right padding: causal, harmless
        logits = model(input_ids=ids.to(model.device)).logits.float()
        logp = torch.log_softmax(logits, dim=-1)  # (B, W, V)
        values, indices = (t.cpu() for t in logp.topk(top_k, dim=-1))
        for row, chunk in enumerate(group):
            n = len(chunk) - 1  # row j predicts chunk[1 + j]
            seqs.append(TeacherSeq(ids=torch.tensor(chunk, dtype=torch.int32), start=1,
                                   top_ids=indices[row, :n].to(torch.int32),
                                   top_lp=values[row, :n].to(torch.float16)))
    return seqs


def text_chunks(tokenizer: Any, paths: list[Path], length: int) -> list[list[int]]:
    """Local text files cut into token windows of ``length``."""
    chunks: list[list[int]] = []
    for path in paths:
        ids = tokenizer.encode(path.read_text(encoding="utf-8", errors="replace"),
                               add_special_tokens=False)
        for i in range(0, max(len(ids) - 1, 0), length):
            piece = [int(t) for t in ids[i:i + length]]
            if len(piece) >= 8:
                chunks.append(piece)
    return chunks


def read_prompt_files(paths: list[Path]) -> list[tuple[str, bool]]:
    """Prompts from text files, one per line (blank lines and '#' lines skipped), chat-templated."""
    prompts: list[tuple[str, bool]] = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                prompts.append((line.strip(), True))
    return prompts


def prompt_stream(chat_ok: bool, seed: int, heldout: bool = False,
                  extra: list[tuple[str, bool]] | None = None,
                  templates: bool = True) -> Iterator[tuple[str, bool]]:
    """Endless prompts: passes over the set, each pass in a seed-dependent order.

    Training draws from the built-in template prompts (unless ``templates`` is False) plus
    ``extra``; the held-out set is always the built-in held-out templates.
    """
    if heldout:
        pool = heldout_prompts()
    else:
        pool = (train_prompts() if templates else []) + list(extra or [])
    if not pool:
        raise ValueError("no training prompts: give a prompt file or keep the built-in ones")
    if not chat_ok:
        pool = [(text, False) for text, _ in pool]
    epoch = 0
    while True:
        order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed + epoch))
        for i in order.tolist():
            yield pool[i]
        epoch += 1


def save_shard(path: Path, seqs: list[TeacherSeq]) -> None:
    """Write a shard atomically (a half-written shard is never read back)."""
    tmp = path.with_suffix(".tmp")
    torch.save([{"ids": s.ids, "start": s.start, "top_ids": s.top_ids, "top_lp": s.top_lp}
                for s in seqs], tmp)
    tmp.replace(path)


def load_shards(folder: Path) -> list[TeacherSeq]:
    """All sequences of the shards in a folder, in shard order."""
    seqs: list[TeacherSeq] = []
    for path in sorted(folder.glob("shard_*.pt")):
        for item in torch.load(path, weights_only=True):
            seqs.append(TeacherSeq(ids=item["ids"], start=int(item["start"]),
                                   top_ids=item["top_ids"], top_lp=item["top_lp"]))
    return seqs


def count_rows(seqs: list[TeacherSeq]) -> int:
    """Teacher rows (positions with a distribution) in a list of sequences."""
    return sum(int(s.top_ids.shape[0]) for s in seqs)


def generate_shards(
    model: Any,
    tokenizer: Any,
    folder: Path,
    tokens: int,
    batch: int,
    max_new_tokens: int,
    top_k: int,
    seed: int,
    heldout: bool = False,
    progress: Callable[[int, int], None] | None = None,
    extra_prompts: list[tuple[str, bool]] | None = None,
    templates: bool = True,
) -> None:
    """Fill ``folder`` with shards until it holds ``tokens`` teacher rows; resumes where it was."""
    folder.mkdir(parents=True, exist_ok=True)
    chat_ok = bool(getattr(tokenizer, "chat_template", None))
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos, default=0)
    done_rows = count_rows(load_shards(folder))
    stream = prompt_stream(chat_ok, seed, heldout, extra_prompts, templates)
    shard = 0
    while True:
        path = folder / f"shard_{shard:05d}.pt"
        prompts = [next(stream) for _ in range(batch)]  # consumed even when skipping: resumable
        if path.is_file():
            shard += 1
            continue
        if done_rows >= tokens:
            return
        gen = torch.Generator(model.device).manual_seed(seed * 1_000_003 + shard)
        encoded = [encode_prompt(tokenizer, text, chat) for text, chat in prompts]
        temps = [ROW_TEMPERATURES[i % len(ROW_TEMPERATURES)] for i in range(batch)]
        draws = torch.randint(0, GREEDY_PREFIX_MAX, (batch,),
                              generator=torch.Generator().manual_seed(seed * 7 + shard))
        prefix = [int(d) if t == 0 else 0 for d, t in zip(draws.tolist(), temps, strict=True)]

        def tick(n: int) -> None:
            if progress is not None:
                progress(n, 0)

        seqs = sample_batch(model, encoded, temps, max_new_tokens, top_k, eos, pad, gen, tick,
                            prefix)
        save_shard(path, seqs)
        done_rows += count_rows(seqs)
        if progress is not None:
            progress(0, done_rows)
        shard += 1


def approx_minutes(tokens: int, tokens_per_s: float = 150.0) -> float:
    """Rough teacher time for a token budget on a 2-core CPU (for messages only)."""
    return math.ceil(tokens / tokens_per_s / 60)
