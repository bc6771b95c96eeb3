"""`specviz distill`: train a small draft (q) that imitates a target (p) by distillation.

Pipeline, each stage resumable from a work folder:
1. teacher data: the target samples continuations of varied prompts (and/or scores local
   text files); its top-k next-token log-probs are stored once and reused every epoch;
2. vocabulary: the draft scores only the target ids that carry most of the teacher's mass
   (q = 0 elsewhere, which keeps speculative sampling exact), written to specviz_vocab.json;
3. student: a small LlamaForCausalLM whose embedding is the target's, projected to its width;
   trained to minimise KL(p || q) on the top-k plus a "rest of the vocabulary" bucket, since
   the acceptance rate sum_x min(p, q) rewards matching the whole distribution;
4. output: a transformers folder (safetensors + config + the target's tokenizer) and a card.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import re
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specviz.core.errors import SpecvizError, one_line
from specviz.core.models import VOCAB_MAP_FILE, draft_id_table

from .data import (
    TeacherSeq,
    approx_minutes,
    count_rows,
    generate_shards,
    load_shards,
    read_prompt_files,
    save_shard,
    score_text,
    text_chunks,
)

CKPT = "checkpoint.pt"
EMBED_INIT_STD = 0.06


@dataclass(frozen=True)
class StudentShape:
    """Size of the draft model."""

    hidden: int = 384
    layers: int = 4
    heads: int = 6
    kv_heads: int = 2
    intermediate: int = 1024
    vocab: int = 10240  # kept target ids; 0 keeps the whole vocabulary


@dataclass(frozen=True)
class EvalResult:
    """Agreement of q with p on held-out teacher rows."""

    alpha_t1: float  # mean sum_x min(p, q): acceptance probability per token at T = 1
    greedy_agree: float  # argmax q == argmax p: acceptance per token at T = 0
    kl: float  # KL(p || q) on top-k + rest bucket (nats)
    coverage: float  # teacher mass on kept ids
    rows: int


# ---------------------------------------------------------------- vocabulary


def teacher_mass(seqs: list[TeacherSeq], full: int) -> torch.Tensor:
    """(full,) float64: each target id's teacher probability mass, plus 1e-3 per occurrence."""
    mass = torch.zeros(full, dtype=torch.float64)
    for s in seqs:
        mass.index_add_(0, s.top_ids.reshape(-1).long(),
                        s.top_lp.float().exp().reshape(-1).double())
        mass.index_add_(0, s.ids.long(), torch.full((s.ids.numel(),), 1e-3, dtype=torch.float64))
    return mass


def choose_vocab(seqs: list[TeacherSeq], size: int, full: int, always: list[int]) -> list[int]:
    """Target ids ranked by teacher probability mass (+ token counts), the top ``size`` kept."""
    if size <= 0 or size >= full:
        return list(range(full))
    mass = teacher_mass(seqs, full)
    mass[torch.tensor(always, dtype=torch.long)] = float("inf")
    keep = torch.topk(mass, size).indices
    return sorted(int(i) for i in keep)


def vocab_lookup(target_ids: list[int], full: int, oov: int) -> torch.Tensor:
    """(full,) target id -> draft id, ``oov`` for ids the draft does not have."""
    return draft_id_table(torch.tensor(target_ids, dtype=torch.long), full, oov)


# ---------------------------------------------------------------- student


def build_student(target: Any, shape: StudentShape, target_ids: list[int], draft_oov: int,
                  seed: int) -> Any:
    """A small Llama over the kept ids; embedding = target rows projected by their top SVD axes."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tcfg = target.config
    lookup = {t: i for i, t in enumerate(target_ids)}

    def mapped(value: Any) -> Any:
        if isinstance(value, int):
            return lookup.get(value, draft_oov)
        if isinstance(value, list):
            return [lookup.get(int(v), draft_oov) for v in value]
        return value

    extra: dict[str, Any] = {}
    rope = getattr(tcfg, "rope_parameters", None)
    if rope:
        extra["rope_parameters"] = dict(rope)
    config = LlamaConfig(
        vocab_size=len(target_ids), hidden_size=shape.hidden,
        intermediate_size=shape.intermediate, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.hidden // shape.heads,
        max_position_embeddings=int(getattr(tcfg, "max_position_embeddings", 2048)),
        rms_norm_eps=float(getattr(tcfg, "rms_norm_eps", 1e-5)), tie_word_embeddings=True,
        bos_token_id=mapped(getattr(tcfg, "bos_token_id", None)),
        eos_token_id=mapped(getattr(tcfg, "eos_token_id", None)),
        pad_token_id=mapped(getattr(tcfg, "pad_token_id", None)),
        **extra,
    )
    torch.manual_seed(seed)
    student = LlamaForCausalLM(config)
    with torch.no_grad():
        emb = target.get_input_embeddings().weight.detach().float().cpu()
        rows = emb[torch.tensor(target_ids, dtype=torch.long)]  # (V', H_t)
        if rows.shape[1] == shape.hidden:
            init = rows
        else:
            # Top principal axes of the kept rows keep most of the geometry of the
            # target's (tied) embedding: similar tokens start with similar vectors.
            _, _, vt = torch.linalg.svd(rows, full_matrices=False)  # vt: (H_t, H_t)
            init = rows @ vt[: shape.hidden].T  # (V', H)
            if init.shape[1] < shape.hidden:
                pad = torch.randn(init.shape[0], shape.hidden - init.shape[1]) * 0.02
                init = torch.cat([init, pad], dim=1)
        # Rescaled so initial logits have a std of about 1 (tied head, RMS-normed states).
        init = init * (EMBED_INIT_STD / init.std().clamp(min=1e-6))
        embedding: Any = student.get_input_embeddings()
        embedding.weight.copy_(init)
        student.tie_weights()
    return student


def load_init(folder: Path, full: int) -> tuple[Any, list[int], int, StudentShape, str]:
    """An existing draft to continue from: model (fp32), its vocabulary, shape, and command."""
    from transformers import AutoModelForCausalLM

    if not (folder / "config.json").is_file():
        raise SystemExit(f"--init {folder}: not a draft folder (no config.json).")
    student = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    vocab_file = folder / VOCAB_MAP_FILE
    if vocab_file.is_file():
        vocab = json.loads(vocab_file.read_text())
        target_ids = [int(i) for i in vocab["target_ids"]]
        oov = int(vocab["oov_draft_id"])
    else:
        target_ids, oov = list(range(full)), 0
    c = student.config
    shape = StudentShape(c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                         c.num_key_value_heads, c.intermediate_size,
                         len(target_ids) if len(target_ids) < full else 0)
    readme = folder / "README.md"
    card = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    command = next((line.split("`")[1] for line in card.splitlines()
                    if line.startswith("- Command:") and line.count("`") >= 2), "")
    # Its own lineage, if it was itself continued from another draft (one line per step).
    before = [c for line in card.splitlines() if line.startswith("- Continued from")
              for c in re.findall(r"itself made by `([^`]*)`", line)]
    return student, target_ids, oov, shape, " ← ".join([command] + before) if command else ""


def widen_vocab(student: Any, target: Any, target_ids: list[int], oov: int,
                seqs: list[TeacherSeq], size: int) -> tuple[Any, list[int], int]:
    """The draft with ``size`` ids: its own rows kept, the ids with most teacher mass added.

    A new id's row starts as the target's embedding row of that id mapped into the draft's
    space by the least-squares map that best sends the target's rows of the draft's current
    ids onto the draft's trained rows (tied embedding and head, so the same row scores it).
    Returns (model, target ids in draft order, oov draft id)."""
    from transformers import LlamaForCausalLM

    full = int(target.get_input_embeddings().weight.shape[0])
    if size <= len(target_ids):
        return student, target_ids, oov
    mass = teacher_mass(seqs, full)
    mass[torch.tensor(target_ids, dtype=torch.long)] = -1.0
    extra = [int(i) for i in torch.topk(mass, min(size, full) - len(target_ids)).indices]
    new_ids = sorted(target_ids + extra)
    new_pos = {t: j for j, t in enumerate(new_ids)}
    with torch.no_grad():
        t_emb = target.get_input_embeddings().weight.detach().float().cpu()
        d_emb = student.get_input_embeddings().weight.detach().float().cpu()
        old = torch.tensor(target_ids, dtype=torch.long)
        fit = torch.linalg.lstsq(t_emb[old], d_emb).solution  # (H_t, H)
        rows = t_emb[torch.tensor(new_ids, dtype=torch.long)] @ fit
        rows[torch.tensor([new_pos[t] for t in target_ids], dtype=torch.long)] = d_emb
    config = student.config.__class__.from_dict(student.config.to_dict())

    def remap(value: Any) -> Any:
        if isinstance(value, int):
            return new_pos[target_ids[value]]
        if isinstance(value, list):
            return [new_pos[target_ids[int(v)]] for v in value]
        return value

    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(config, key, None)
        if value is not None:
            setattr(config, key, remap(value))
    config.vocab_size = len(new_ids)
    wide = LlamaForCausalLM(config)
    state = {k: v for k, v in student.state_dict().items()
             if not k.endswith(("embed_tokens.weight", "lm_head.weight"))}
    missing, unexpected = wide.load_state_dict(state, strict=False)
    if unexpected or not all(k.endswith(("embed_tokens.weight", "lm_head.weight"))
                             for k in missing):
        raise RuntimeError(f"--widen-vocab: the draft's weights do not fit a {type(wide).__name__} "
                           f"(missing {missing}, unexpected {unexpected})")
    embeddings = wide.get_input_embeddings()
    if not isinstance(embeddings, nn.Embedding):
        raise RuntimeError(f"--widen-vocab: {type(wide).__name__}'s input embeddings are a "
                           f"{type(embeddings).__name__}, not an embedding table")
    with torch.no_grad():
        embeddings.weight.copy_(rows)
        wide.tie_weights()
    # In place; through nn.Module's signature (transformers' @wraps override hides it from mypy).
    module: nn.Module = wide
    module.to(torch.float32)
    return wide, new_ids, new_pos[target_ids[oov]]


# ---------------------------------------------------------------- batches and loss


@dataclass
class Batch:
    """Inputs and soft targets, aligned with the student's logits positions."""

    inputs: torch.Tensor  # (B, T) draft ids
    top_ids: torch.Tensor  # (B, T, k) draft ids of the teacher's top-k, -1 if not kept
    top_lp: torch.Tensor  # (B, T, k) log p
    mask: torch.Tensor  # (B, T) True where a teacher row exists

    def to(self, device: torch.device) -> Batch:
        """The same batch on ``device``."""
        return Batch(*(t.to(device, non_blocking=True)
                       for t in (self.inputs, self.top_ids, self.top_lp, self.mask)))


def make_batch(seqs: list[TeacherSeq], lookup: torch.Tensor, oov: int,
               seq_len: int) -> Batch:
    """Right-padded batch (causal, so padding never leaks backwards); logits t <-> row t+1-start."""
    k = int(seqs[0].top_ids.shape[1])
    width = min(seq_len, max(int(s.ids.numel()) for s in seqs))
    b = len(seqs)
    inputs = torch.full((b, width), oov, dtype=torch.long)
    top_ids = torch.full((b, width, k), -1, dtype=torch.long)
    top_lp = torch.full((b, width, k), -30.0, dtype=torch.float32)
    mask = torch.zeros((b, width), dtype=torch.bool)
    kept = lookup != oov
    for row, s in enumerate(seqs):
        n = min(int(s.ids.numel()), width)
        inputs[row, :n] = lookup[s.ids[:n].long()]
        # Row j is p(. | ids[:start+j]), i.e. the logits at position start+j-1 (< n).
        rows = min(int(s.top_ids.shape[0]), n - s.start + 1)
        if rows <= 0:
            continue
        pos = slice(s.start - 1, s.start - 1 + rows)
        tid = s.top_ids[:rows].long()
        top_ids[row, pos] = torch.where(kept[tid], lookup[tid], torch.full_like(tid, -1))
        top_lp[row, pos] = s.top_lp[:rows].float()
        mask[row, pos] = True
    return Batch(inputs, top_ids, top_lp, mask)


@dataclass
class LossParts:
    """Per-position loss terms."""

    ce: torch.Tensor  # (B, T) cross-entropy of q against p (top-k + rest)
    kl: torch.Tensor  # (B, T)
    alpha: torch.Tensor  # (B, T) sum min(p, q) on the same buckets
    agree: torch.Tensor  # (B, T) argmax q == argmax p


def _cpu(parts: LossParts) -> LossParts:
    return LossParts(*(t.detach().cpu() for t in (parts.ce, parts.kl, parts.alpha, parts.agree)))


def distill_loss(logits: torch.Tensor, batch: Batch) -> LossParts:
    """KL(p || q) over the teacher's top-k ids plus one bucket for all the other ids."""
    logq = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V')
    valid = batch.top_ids >= 0  # (B, T, k)
    sel = logq.gather(-1, batch.top_ids.clamp(min=0))  # (B, T, k)
    p = batch.top_lp.exp() * valid
    p_rest = (1.0 - p.sum(-1)).clamp(min=1e-8)  # tail + top-k ids the draft lacks
    q_in = (sel.exp() * valid).sum(-1)
    logq_rest = torch.log((1.0 - q_in).clamp(min=1e-8))
    ce = -(p * sel).sum(-1) - p_rest * logq_rest  # (B, T)
    ent = -(p * batch.top_lp * valid).sum(-1) - p_rest * torch.log(p_rest)
    alpha = (torch.minimum(p, sel.exp()) * valid).sum(-1) + torch.minimum(p_rest, 1.0 - q_in)
    agree = logq.argmax(-1) == torch.where(valid[..., 0], batch.top_ids[..., 0], -2)
    return LossParts(ce=ce, kl=ce - ent, alpha=alpha, agree=agree)


@torch.no_grad()
def evaluate(student: Any, seqs: list[TeacherSeq], lookup: torch.Tensor, oov: int,
             seq_len: int, batch_size: int = 8) -> EvalResult:
    """Mean acceptance estimates of the student against held-out teacher rows."""
    was_training = student.training
    student.eval()
    sums = torch.zeros(4, dtype=torch.float64)
    n = 0
    kept = lookup != oov
    for i in range(0, len(seqs), batch_size):
        batch = make_batch(seqs[i:i + batch_size], lookup, oov, seq_len)
        logits = student(input_ids=batch.inputs.to(student.device)).logits
        parts = _cpu(distill_loss(logits, batch.to(student.device)))
        m = batch.mask
        cover = torch.zeros_like(parts.kl)
        for row, s in enumerate(seqs[i:i + batch_size]):
            rows = int(m[row].sum())
            if rows:
                p = s.top_lp[:rows].float().exp()
                cover[row, m[row]] = (p * kept[s.top_ids[:rows].long()]).sum(-1)
        sums += torch.tensor([float(parts.alpha[m].sum()), float(parts.agree[m].sum()),
                              float(parts.kl[m].sum()), float(cover[m].sum())],
                             dtype=torch.float64)
        n += int(m.sum())
    student.train(was_training)
    a, g, kl, c = (float(v) / max(n, 1) for v in sums)
    return EvalResult(alpha_t1=a, greedy_agree=g, kl=kl, coverage=c, rows=n)


# ---------------------------------------------------------------- training


_clock = time.monotonic  # the training time budget's clock (a seam for tests)


def lr_at(step: int, steps: int, lr: float, done: float = 0.0) -> float:
    """Linear warm-up, then cosine decay to a tenth.

    ``done`` is the share of a time budget (``--minutes``) already spent: the decay follows
    whichever of steps or time is further along, so a run cut by its budget still ends
    cooled down.
    """
    warm = max(1, min(100, steps // 10))
    if step < warm:
        return lr * (step + 1) / warm
    t = max((step - warm) / max(1, steps - warm), done)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


def batch_indices(step: int, n: int, batch: int, seed: int) -> list[int]:
    """The sequences of a step: a seed-and-epoch-fixed permutation, so resuming repeats it."""
    per_epoch = max(1, n // batch)
    epoch, i = divmod(step, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 7919 + epoch))
    return [int(j) for j in order[i * batch:(i + 1) * batch]]


def save_checkpoint(path: Path, student: Any, opt: torch.optim.Optimizer, step: int,
                    history: list[dict[str, float]], seconds: float = 0.0) -> None:
    """Atomic checkpoint: an interrupted save never replaces the previous one."""
    tmp = path.with_suffix(".tmp")
    torch.save({"model": student.state_dict(), "opt": opt.state_dict(), "step": step,
                "history": history, "seconds": seconds}, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's state, unpickled with torch's safe loader: tensors, numbers, strings only.

    A work folder may be shared or downloaded; a full unpickler would run whatever code a
    crafted checkpoint names, so anything beyond plain data is refused with one message.
    """
    try:
        state = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:  # a class or function in the pickle: never run it
        named = re.search(r"GLOBAL ([\w.]+)", str(exc))
        found = f" (it names {named.group(1)})" if named else ""
        raise SpecvizError(
            f"{path} holds more than tensors and numbers{found}; it was not "
            "loaded, since unpickling it could run code. If you wrote it yourself with an "
            "older specviz, delete it to train from step 0.") from None
    except (RuntimeError, EOFError, OSError) as exc:  # cut short, not a torch file at all
        first = one_line(str(exc), 200).split(". ")[0]  # torch adds paragraphs of advice
        raise SpecvizError(f"{path} is not a readable checkpoint, cut short or damaged "
                           f"({first}); delete it to train from step 0.") from None
    if not isinstance(state, dict) or not {"model", "opt", "step", "history"} <= state.keys():
        raise SpecvizError(f"{path} is not a specviz checkpoint (no model, opt, step and "
                           "history); delete it to train from step 0.")
    return state


def train(student: Any, data: list[TeacherSeq], heldout: list[TeacherSeq], lookup: torch.Tensor,
          oov: int, args: argparse.Namespace, work: Path) -> list[dict[str, float]]:
    """Train (or resume training) for ``args.steps`` steps; returns the eval history."""
    from tqdm.auto import tqdm

    opt = torch.optim.AdamW(student.parameters(), lr=args.lr, weight_decay=0.05,
                            betas=(0.9, 0.98))
    step, history, before = 0, [], 0.0
    ckpt = work / CKPT
    if ckpt.is_file():
        state = load_checkpoint(ckpt)
        student.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, history = int(state["step"]), list(state["history"])
        before = float(state.get("seconds", 0.0))  # training time of earlier invocations
        print(f"Resuming from step {step} ({ckpt}).", file=sys.stderr)
    budget = 60.0 * args.minutes  # 0: no time budget
    began = _clock()

    def spent() -> float:
        """Share of the time budget used (0 without one)."""
        return (before + _clock() - began) / budget if budget > 0 else 0.0

    student.train()
    bar = tqdm(total=args.steps, initial=step, desc="distil", unit="step",
               disable=args.quiet, dynamic_ncols=True)
    last_eval = time.time()

    def build(at: int) -> Batch:
        idx = batch_indices(at, len(data), args.batch_size, args.seed)
        return make_batch([data[i] for i in idx], lookup, oov, args.seq_len)

    # The next batch is assembled on a second thread while this one trains (on a GPU the
    # assembly would otherwise take longer than the step).
    pool = ThreadPoolExecutor(max_workers=1)
    upcoming = pool.submit(build, step)
    try:
        while step < args.steps:
            done = spent()
            if done >= 1.0:
                bar.write(f"Time budget of {args.minutes:g} min spent at step {step}.")
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(step, args.steps, args.lr, done)
            batch = upcoming.result().to(student.device)
            if step + 1 < args.steps:
                upcoming = pool.submit(build, step + 1)  # (wasted if the budget ends first)
            # bf16 autocast: ~3x faster matmuls on CPUs with AVX512-BF16/AMX (and the tensor
            # cores of a GPU); the master weights, optimizer and loss stay fp32.
            with torch.autocast(student.device.type, dtype=torch.bfloat16,
                                enabled=args.precision == "bf16"):
                logits = student(input_ids=batch.inputs).logits
            parts = distill_loss(logits, batch)
            m = batch.mask
            loss = parts.ce[m].mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
            opt.step()
            step += 1
            bar.update(1)
            bar.set_postfix(kl=f"{float(parts.kl[m].mean().detach()):.3f}",
                            alpha=f"{float(parts.alpha[m].mean().detach()):.3f}")
            last = step == args.steps or spent() >= 1.0
            if step % args.eval_every == 0 or last:
                result = evaluate(student, heldout, lookup, oov, args.seq_len)
                history.append({"step": step, "alpha_t1": result.alpha_t1,
                                "greedy_agree": result.greedy_agree, "kl": result.kl,
                                "train_kl": float(parts.kl[m].mean().detach()),
                                "minutes": (time.time() - last_eval) / 60})
                last_eval = time.time()
                bar.write(f"step {step}: held-out alpha(T=1) {result.alpha_t1:.3f}, "
                          f"greedy agreement {result.greedy_agree:.3f}, KL {result.kl:.3f}")
            if step % args.ckpt_every == 0 or last:
                save_checkpoint(ckpt, student, opt, step, history,
                                before + _clock() - began)
    except KeyboardInterrupt:
        save_checkpoint(ckpt, student, opt, step, history, before + _clock() - began)
        bar.close()
        print(f"Interrupted: checkpoint saved at step {step}; run the same command to resume.",
              file=sys.stderr)
        raise
    finally:
        pool.shutdown(cancel_futures=True)
    bar.close()
    return history


# ---------------------------------------------------------------- output


def write_draft(student: Any, tokenizer: Any, out: Path, target_ids: list[int], oov: int,
                full: int, card: str, dtype: torch.dtype) -> None:
    """The draft folder: safetensors + config, the target's tokenizer, vocab map, model card."""
    out.mkdir(parents=True, exist_ok=True)
    student.to(dtype).save_pretrained(out)
    student.to(torch.float32)
    tokenizer.save_pretrained(out)
    vocab_file = out / VOCAB_MAP_FILE
    if len(target_ids) < full:
        vocab_file.write_text(json.dumps({"target_ids": target_ids, "oov_draft_id": oov}))
    elif vocab_file.exists():
        vocab_file.unlink()
    (out / "README.md").write_text(card, encoding="utf-8")


def steps_done(args: argparse.Namespace, history: list[dict[str, float]] | None) -> str:
    """The steps a run took: ``--steps``, or fewer where ``--minutes`` ended it first."""
    done = int(history[-1]["step"]) if history else args.steps
    if done < args.steps:
        return f"{done} (of --steps {args.steps}; --minutes {args.minutes:g} ended it)"
    return str(args.steps)


def model_card(args: argparse.Namespace, argv: list[str], target_name: str, shape: StudentShape,
               n_params: int, data_rows: int, n_seqs: int, heldout: EvalResult,
               untrained: EvalResult, minutes: float, init_command: str = "",
               hardware: str = "", history: list[dict[str, float]] | None = None) -> str:
    """A short README for the draft folder."""
    command = "specviz distill " + " ".join(shlex.quote(a) for a in argv)
    start = "start (--init)" if args.init else "untrained"
    lineage = ""
    if args.init:
        lineage = (f"- Continued from the draft in `{args.init}`"
                   + "".join(f", itself made by `{c}`" for c in init_command.split(" ← ") if c)
                   + ".\n")
    h, u = heldout, untrained
    widened = (" (the --init draft's ids, widened by --widen-vocab with the ids of most teacher "
               "mass in this run's data)" if args.init and args.widen_vocab else "")
    sources = []
    if args.teacher_tokens > 0:
        pools = [] if args.no_template_prompts else [
            "built-in template prompts (specviz.distill.prompts, held-out excluded)"]
        pools += [f"prompts of {Path(f).name}" for f in args.prompt_file]
        sources.append(f"{args.teacher_tokens} target-sampled continuation tokens of "
                       + " and ".join(pools))
    for folder in args.teacher_dir:
        from .teacher import summary

        info = summary(Path(folder).expanduser())
        mix = ", ".join(f"{k} {v}" for k, v in sorted(info["prompt_mix"].items()))
        hw = "; ".join(f"{v} rows on {k}" for k, v in info["rows_by_hardware"].items())
        sources.append(f"teacher shards of {Path(folder).name} ({info['shards']} shards, "
                       f"{info['rows']} rows; prompts by source: {mix}; {hw})")
    for path in args.text:
        sources.append(f"text file {Path(path).name}")
    return f"""# Distilled draft for {target_name}

A speculative-decoding draft (q) for the target (p) `{target_name}`, trained by
`specviz distill`: it minimises KL(p || q) against the target's top-{args.top_k} next-token
distributions on text the target generated itself. Same tokenizer as the target.

- Command: `{command}`
{lineage}- Architecture: LlamaForCausalLM, hidden {shape.hidden}, {shape.layers} layers,
  {shape.heads} heads ({shape.kv_heads} KV), MLP {shape.intermediate}; {n_params / 1e6:.1f}M
  parameters; weights stored as {args.save_dtype}.
- Vocabulary: {len_vocab(args, shape)} target ids ranked by teacher mass
  (`{VOCAB_MAP_FILE}`){widened}; q = 0 for other ids, so speculative sampling stays exact.
- Data: {'; '.join(sources)}; {n_seqs} sequences, {data_rows} teacher rows.
- Training: {steps_done(args, history)} steps, batch {args.batch_size}, sequence length
  {args.seq_len}, lr {args.lr}, seed {args.seed};
  this run's training took {minutes:.0f} min{hardware}.

## Measured on held-out prompts ({heldout.rows} target positions)

| | {start} | distilled |
|---|---|---|
| per-token acceptance at T=1, E[sum min(p, q)] | {u.alpha_t1:.3f} | {h.alpha_t1:.3f} |
| per-token acceptance at T=0, argmax agreement | {u.greedy_agree:.3f} | {h.greedy_agree:.3f} |
| KL(p \\|\\| q), nats | {u.kl:.3f} | {h.kl:.3f} |

Teacher mass on the kept ids: {heldout.coverage:.3f}. Rows are scored with the top-k + rest
bucket, so the T=1 figure is a slight over-estimate; `benchmarks/draft_quality.py` measures
acceptance through the real decoder.
"""


def len_vocab(args: argparse.Namespace, shape: StudentShape) -> str:
    """Kept vocabulary size as text."""
    return str(shape.vocab) if shape.vocab else "all"


# ---------------------------------------------------------------- command


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line of ``specviz distill``."""
    p = argparse.ArgumentParser(
        prog="specviz distill",
        description="Train a small draft model for a target by distillation (CPU-friendly, "
                    "resumable: run the same command again to continue). Also: `specviz "
                    "distill teacher --help` (teacher rows by the million) and `specviz "
                    "distill calibrate --help` (the draft's temperature scale).")
    p.add_argument("--target", required=True, help="hub id, model folder or .gguf file "
                   "(smollm2-135m: the bundled target)")
    p.add_argument("--out", required=True, help="folder to write the draft to")
    p.add_argument("--work-dir", help="teacher data and checkpoints (default: <out>.work)")
    p.add_argument("--text", action="append", default=[], metavar="FILE",
                   help="local text file to distil on (repeatable)")
    p.add_argument("--prompt-file", action="append", default=[], metavar="FILE",
                   help="more prompts for the target to answer, one per line (repeatable)")
    p.add_argument("--no-template-prompts", action="store_true",
                   help="train only on --prompt-file prompts, not the built-in templates")
    p.add_argument("--teacher-dir", action="append", default=[], metavar="DIR",
                   help="also train on every shard under DIR, written by `specviz distill "
                        "teacher` (repeatable; give --teacher-tokens 0 to use only these)")
    p.add_argument("--teacher-tokens", type=int, default=200_000,
                   help="target-generated tokens to collect (0: only --text)")
    p.add_argument("--heldout-tokens", type=int, default=6_000,
                   help="target-generated tokens on held-out prompts, for evaluation")
    p.add_argument("--gen-batch", type=int, default=32, help="sequences sampled at once")
    p.add_argument("--max-new-tokens", type=int, default=224, help="length of a continuation")
    p.add_argument("--top-k", type=int, default=64, help="teacher log-probs stored per token")
    p.add_argument("--vocab", type=int, default=10240,
                   help="target ids the draft can propose (0: all)")
    p.add_argument("--init", metavar="DRAFT_DIR",
                   help="continue from this draft (its weights, shape and vocabulary)")
    p.add_argument("--widen-vocab", type=int, default=0, metavar="N",
                   help="with --init: grow the draft's vocabulary to N ids, adding the ids "
                        "with most teacher mass in the training data")
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--minutes", type=float, default=0.0,
                   help="also stop after this many minutes of training (0: no limit); the "
                        "learning rate decays by whichever of steps or time is further along, "
                        "so a lent machine's lease can bound a run")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=288)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--ckpt-every", type=int, default=25)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                   help="precision of the student's training matmuls (master weights stay fp32)")
    p.add_argument("--teacher-precision", choices=["bf16", "fp32"], default="bf16",
                   help="the target's precision for training rows (held-out rows: fp32)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"],
                   help="where the teacher and the student run (auto: cuda if available)")
    p.add_argument("--save-dtype", choices=["float16", "bfloat16", "float32"],
                   default="float16", help="dtype of the saved weights (loaders upcast)")
    p.add_argument("--stage", choices=["all", "data"], default="all",
                   help="data: only collect teacher data")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if args.teacher_tokens <= 0 and not args.text and not args.teacher_dir:
        p.error("nothing to train on: give --teacher-tokens > 0, --teacher-dir DIR or --text "
                "FILE")
    for folder in args.teacher_dir:
        if not Path(folder).expanduser().is_dir():
            p.error(f"folder not found: {folder}")
    if args.no_template_prompts and not args.prompt_file:
        p.error("--no-template-prompts needs at least one --prompt-file")
    for path in args.prompt_file + args.text:
        if not Path(path).is_file():
            p.error(f"file not found: {path}")
    if args.no_template_prompts and not read_prompt_files([Path(f) for f in args.prompt_file]):
        p.error("--no-template-prompts, and the --prompt-file files hold no prompts")
    if args.widen_vocab and not args.init:
        p.error("--widen-vocab needs --init (a new draft takes --vocab N)")
    if args.hidden % args.heads or args.heads % args.kv_heads:
        p.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    return args


def _collect(target: Any, tokenizer: Any, args: argparse.Namespace, work: Path) -> None:
    """Stage 1: teacher data (resumable per shard)."""
    from tqdm.auto import tqdm

    if args.teacher_tokens > 0 or args.teacher_dir:
        for folder, tokens, heldout, seed in (
            (work / "heldout", args.heldout_tokens, True, 10_000),
            (work / "train", args.teacher_tokens, False, args.seed),
        ):
            if tokens <= 0:
                continue
            have = count_rows(load_shards(folder)) if folder.is_dir() else 0
            if have >= tokens:
                continue
            what = "held-out" if heldout else "training"
            bar = tqdm(total=tokens, initial=have, unit="tok", disable=args.quiet,
                       desc=f"teacher ({what}, ~{approx_minutes(tokens - have)} min)",
                       dynamic_ncols=True)

            def progress(live: int, total: int, bar: Any = bar) -> None:
                if total:
                    bar.n = min(total, bar.total)
                    bar.refresh()
                else:
                    bar.update(live)

            # Held-out rows always come from the fp32 target, so the evaluation is exact;
            # training rows may come from a bf16 copy (about 2x the tokens/s on CPUs with
            # AVX512-BF16/AMX, and rounding noise far below what a small draft can learn).
            teacher = target
            if not heldout and args.teacher_precision == "bf16":
                import copy

                teacher = copy.deepcopy(target).to(torch.bfloat16)
            generate_shards(teacher, tokenizer, folder, tokens, args.gen_batch,
                            args.max_new_tokens, args.top_k, seed, heldout, progress,
                            read_prompt_files([Path(f) for f in args.prompt_file]),
                            not args.no_template_prompts)
            del teacher
            bar.close()
    text_dir = work / "text"
    if args.text and not (text_dir / "shard_00000.pt").is_file():
        chunks = text_chunks(tokenizer, [Path(t) for t in args.text], args.seq_len)
        text_dir.mkdir(parents=True, exist_ok=True)
        seqs = score_text(target, chunks, args.top_k, batch=8)
        if args.teacher_tokens <= 0 and not args.teacher_dir:  # no held-out set: every 10th
            save_shard(text_dir / "heldout.pt", seqs[::10])
            seqs = [s for i, s in enumerate(seqs) if i % 10]
        save_shard(text_dir / "shard_00000.pt", seqs)


def _stop_on_sigterm() -> None:
    """Treat SIGTERM (a session or job ending) like Ctrl-C: checkpoint, then stop."""
    import signal
    import threading

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def main(argv: list[str]) -> int:
    """Entry point of ``specviz distill``; returns the exit status."""
    if argv[:1] == ["teacher"]:  # `specviz distill teacher ...`: teacher shards only
        from .teacher import main as teacher_main

        return teacher_main(argv[1:])
    if argv[:1] == ["calibrate"]:  # `specviz distill calibrate ...`: the draft's temperature scale
        from .calibrate import main as calibrate_main

        return calibrate_main(argv[1:])
    args = parse_args(argv)
    try:
        return _run(args, argv)
    except SpecvizError as exc:  # a wrong model, an unreadable --init: one line, no traceback
        print(f"specviz distill: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    _stop_on_sigterm()
    if args.threads:
        torch.set_num_threads(args.threads)
    from specviz.core.models import load_model

    out = Path(args.out).expanduser()
    work = Path(args.work_dir).expanduser() if args.work_dir else out.with_name(out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    loaded = load_model(args.target, device=args.device, dtype="float32",
                        progress=None if args.quiet else lambda m: print(m, file=sys.stderr))
    target, tokenizer = loaded.model, loaded.tokenizer
    full = int(target.get_output_embeddings().weight.shape[0])

    _collect(target, tokenizer, args, work)
    if args.stage == "data":
        print(f"Teacher data ready in {work}.", file=sys.stderr)
        return 0

    data = load_shards(work / "train") if args.teacher_tokens > 0 else []
    if args.teacher_dir:
        from .teacher import load_teacher_dir

        for folder in args.teacher_dir:
            data += load_teacher_dir(Path(folder).expanduser())
    data += load_shards(work / "text") if args.text else []
    if args.teacher_tokens > 0 or args.teacher_dir:
        heldout = load_shards(work / "heldout")
    else:
        heldout = [TeacherSeq(ids=d["ids"], start=int(d["start"]), top_ids=d["top_ids"],
                              top_lp=d["top_lp"])
                   for d in torch.load(work / "text" / "heldout.pt", weights_only=True)]
    data = [s for s in data if s.top_ids.shape[0] > 0 and s.start < args.seq_len]
    heldout = [s for s in heldout if s.top_ids.shape[0] > 0 and s.start < args.seq_len]
    if not data or not heldout:
        print("No usable teacher data (sequences longer than --seq-len?).", file=sys.stderr)
        return 1
    widths = {int(s.top_ids.shape[1]) for s in data + heldout}
    if len(widths) > 1:
        print(f"Teacher rows of different --top-k ({sorted(widths)}): give the --top-k the "
              "--teacher-dir shards were made with.", file=sys.stderr)
        return 1

    init_command = ""
    if args.init:
        # Continue from an existing draft: its weights, shape and vocabulary are kept.
        student, target_ids, oov, shape, init_command = load_init(Path(args.init), full)
        if args.widen_vocab > len(target_ids):
            student, target_ids, oov = widen_vocab(student, target, target_ids, oov, data,
                                                   args.widen_vocab)
            shape = StudentShape(shape.hidden, shape.layers, shape.heads, shape.kv_heads,
                                 shape.intermediate, len(target_ids))
    else:
        # The draft never proposes ids outside its vocabulary; specials must stay in it.
        always = sorted({int(i) for i in tokenizer.all_special_ids if 0 <= int(i) < full})
        vocab_file = work / "vocab.json"
        if vocab_file.is_file():
            target_ids = [int(i) for i in json.loads(vocab_file.read_text())]
        else:
            target_ids = choose_vocab(data, args.vocab, full, always)
            vocab_file.write_text(json.dumps(target_ids))
        unk = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else always[0]
        oov_target = int(unk) if int(unk) in target_ids else target_ids[0]
        oov = target_ids.index(oov_target)  # ids the draft lacks are fed to it as this one
        shape = StudentShape(args.hidden, args.layers, args.heads, args.kv_heads,
                             args.intermediate, len(target_ids) if args.vocab else 0)
        student = build_student(target, shape, target_ids, oov, args.seed)
    lookup = vocab_lookup(target_ids, full, oov)
    student.to(target.device)
    untrained = evaluate(student, heldout, lookup, oov, args.seq_len)
    n_params = sum(p.numel() for p in student.parameters())
    start = "initial" if args.init else "untrained"
    if not args.quiet:
        print(f"Student: {n_params / 1e6:.1f}M parameters, vocabulary {len(target_ids)}; "
              f"{len(data)} sequences, {count_rows(data)} teacher rows; {start} held-out "
              f"alpha(T=1) {untrained.alpha_t1:.3f}, greedy agreement "
              f"{untrained.greedy_agree:.3f}.", file=sys.stderr)
    del target  # free the teacher before training
    t0 = time.time()
    try:
        history = train(student, data, heldout, lookup, oov, args, work)
    except KeyboardInterrupt:
        return 130
    result = evaluate(student, heldout, lookup, oov, args.seq_len)
    device = student.device
    hardware = (f" on {torch.cuda.get_device_name(device)}" if device.type == "cuda"
                else f" on the CPU ({torch.get_num_threads()} threads)")
    card = model_card(args, argv, loaded.name, shape, n_params, count_rows(data), len(data),
                      result, untrained, (time.time() - t0) / 60, init_command, hardware,
                      history)
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16,
             "float32": torch.float32}[args.save_dtype]
    write_draft(student, tokenizer, out, target_ids, oov, full, card, dtype)
    (work / "result.json").write_text(json.dumps({
        "heldout": result.__dict__, "untrained": untrained.__dict__,
        "minutes": (time.time() - started) / 60}, indent=2))
    if not args.quiet:
        print(f"Draft written to {out}: held-out alpha(T=1) {result.alpha_t1:.3f}, greedy "
              f"agreement {result.greedy_agree:.3f} ({start} {untrained.alpha_t1:.3f} / "
              f"{untrained.greedy_agree:.3f}).", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


def console_main() -> int:
    """The ``specviz-distill`` console script."""
    return main(sys.argv[1:])
