"""Drafting with another tokenizer: the exact token-level form (TLI, Timor et al., ICML 2025).

What transformers' ``UniversalSpeculativeDecodingGenerator`` and vLLM implement. p = target,
q = draft.

- :class:`SharedVocab`: the tokens whose strings exist in both vocabularies, mapped both ways
  (a byte-level BPE's space sign normalised, as transformers does).
- :class:`DraftText`: the draft's own tokenization of the target's committed ids, kept
  incrementally: the target's new ids are decoded through a short window (a character split
  over several ids waits for its last byte) and only the tail after the last safe boundary
  is re-encoded with the draft's tokenizer.
- :class:`CrossTokenizerDrafter`: the draft reads that tokenization, and each draft token is
  drawn from q restricted to the shared vocabulary (the rest masked out of the logits before
  the warper, so q is zero outside it), then mapped to the target's id. Verification is the
  usual one, in the target's vocabulary, against q mapped there (zero elsewhere): a target
  token the draft cannot propose keeps its full p in the residual norm(max(0, p − q)).

Exactness needs nothing from the mapping itself: each round's q is a function of the committed
text alone, and Leviathan et al.'s theorem holds for any such q (the test enumerates it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .cached_model import CachedModel, ModelRunner
from .drafters import (
    Drafter,
    DraftTools,
    ModelBackedDrafter,
    ModelDrafter,
    Probs,
    build_model_drafter,
)
from .plans import GoOn, Plan, Proposal
from .rng import Random

if TYPE_CHECKING:
    from .events import Settings
    from .models import ModelPair

REPLACEMENT = "\ufffd"
# Target ids decoded again around the new ones, so a token's leading space (SentencePiece)
# and a multi-byte character split over ids decode as they do in the whole text.
DECODE_WINDOW = 6
# A tail this long (characters) with no safe boundary is cut anyway: re-encoding it each round
# would cost more and more (text without spaces). The draft's tokenization may then differ from
# a full re-encoding there; q stays exact whatever the draft reads.
TAIL_LIMIT = 512
# How many recent target tokens the on-screen share outside the shared vocabulary counts.
RECENT_TOKENS = 256


@dataclass(frozen=True)
class VocabReport:
    """What the shared vocabulary covers: for the CLI header and the app."""

    shared: int  # tokens whose strings exist in both vocabularies
    target_size: int  # the target's tokens (its LM head's rows)
    draft_size: int  # the draft's
    counted: int  # recent target tokens looked at
    outside: int  # of them, tokens outside the shared vocabulary (the draft cannot propose)

    @property
    def outside_share(self) -> float:
        return self.outside / self.counted if self.counted else 0.0

    def text(self, what: str = "recent") -> str:
        """One line: "12,034 of the target's 49,152 tokens shared with the draft's 151,665;
        3.1% of the prompt's 40 tokens lie outside it"."""
        line = (f"{self.shared:,} of the target's {self.target_size:,} tokens shared with the "
                f"draft's {self.draft_size:,}")
        if self.counted:
            line += (f"; {100 * self.outside_share:.1f}% of the {what} {self.counted:,} "
                     f"target tokens lie outside it (the draft cannot propose them)")
        return line


class SharedVocab:
    """Token ids of the strings both vocabularies hold, mapped both ways (-1: not shared)."""

    def __init__(self, draft_to_target: torch.Tensor, target_size: int) -> None:
        self.draft_to_target = draft_to_target.long()  # (V_draft,)
        self.target_size = target_size
        self.draft_size = len(draft_to_target)
        self.draft_shared = self.draft_to_target >= 0  # (V_draft,) bool
        self.shared_draft_ids = torch.nonzero(self.draft_shared)[:, 0]  # (S,)
        self.shared_target_ids = self.draft_to_target[self.shared_draft_ids]  # (S,)
        self.target_to_draft = torch.full((target_size,), -1, dtype=torch.long)
        self.target_to_draft[self.shared_target_ids] = self.shared_draft_ids
        self.target_shared = self.target_to_draft >= 0  # (V_target,) bool

    @classmethod
    def build(cls, target_tokenizer: Any, draft_tokenizer: Any, target_size: int,
              draft_size: int) -> SharedVocab:
        """From the two tokenizers' vocabularies; ids past either LM head are not shared."""
        target_vocab = target_tokenizer.get_vocab()
        draft_vocab = dict(draft_tokenizer.get_vocab())
        t_sign, d_sign = _space_sign(target_tokenizer), _space_sign(draft_tokenizer)
        if t_sign and d_sign and t_sign != d_sign:  # "▁the" and "Ġthe" are one string
            draft_vocab = {(tok.replace(d_sign, t_sign, 1) if tok.startswith(d_sign) else tok): i
                           for tok, i in draft_vocab.items()}
        table = torch.full((draft_size,), -1, dtype=torch.long)
        taken: set[int] = set()
        for tok, d_id in sorted(draft_vocab.items(), key=lambda item: item[1]):
            t_id = target_vocab.get(tok)
            if t_id is None or d_id >= draft_size or t_id >= target_size or t_id in taken:
                continue  # one draft id per target id: the map must be one-to-one
            table[d_id] = t_id
            taken.add(t_id)
        return cls(table, target_size)

    @property
    def size(self) -> int:
        return len(self.shared_draft_ids)

    def to_target_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """(n, V_draft) probabilities -> (n, V_target), zero outside the shared vocabulary."""
        out = rows.new_zeros((rows.shape[0], self.target_size))
        out[:, self.shared_target_ids] = rows[:, self.shared_draft_ids]
        return out

    def report(self, target_ids: Sequence[int], recent: int = RECENT_TOKENS) -> VocabReport:
        """The shared vocabulary's size, and how many of the last ``recent`` target ids lie
        outside it."""
        ids = [i for i in list(target_ids)[-recent:] if 0 <= i < self.target_size]
        outside = sum(1 for i in ids if not bool(self.target_shared[i]))
        return VocabReport(self.size, self.target_size, self.draft_size, len(ids), outside)


def _space_sign(tokenizer: Any) -> str:
    """The character a tokenizer writes for a leading space ("Ġ", "▁"), or ""."""
    try:
        ids = tokenizer(" ", add_special_tokens=False)["input_ids"]
        if ids:
            first = tokenizer.convert_ids_to_tokens(ids)[0]
            return str(first[0]) if first else ""
    except Exception:  # noqa: BLE001, S110 - a tokenizer without this API: no normalisation
        pass
    return ""


def _special_prefix(tokenizer: Any) -> list[int]:
    """The ids a tokenizer puts before any text (BOS), found by encoding a probe both ways."""
    with_special = list(tokenizer("x", add_special_tokens=True)["input_ids"])
    without = list(tokenizer("x", add_special_tokens=False)["input_ids"])
    n = len(with_special) - len(without)
    if n > 0 and with_special[n:n + len(without)] == without:
        return with_special[:n]
    return []


def _closed(text: str) -> str:
    """``text`` without a character still open at its end (decoded as one U+FFFD)."""
    return text[:-1] if text.endswith(REPLACEMENT) else text


def _last_cut(text: str, start: int) -> int:
    """The last position after ``start`` where the draft's tokenization of the text may be cut
    without changing it (-1: none): before a space that precedes a non-space character, or
    before a non-space character after a single line break that follows one. Byte-level BPE
    pre-tokenizers (GPT-2's, Llama 3's, Qwen's) start a new piece there whatever follows, and
    the whitespace before it ends a piece alone as it does in the whole text (a run of line
    breaks does not: "\n\n" at the end of a text is one piece, before "#" two)."""
    for c in range(len(text) - 2, max(start, 1), -1):
        if text[c + 1].isspace():
            continue
        if text[c] == " " or (text[c - 1] == "\n" and not text[c].isspace()
                              and not text[c - 2].isspace()):
            return c
    return -1


class DraftText:
    """The draft's tokenization of the target's committed ids, updated by re-encoding the tail.

    ``sync(target_ids)`` takes the committed ids (each call extends the last call's; a new
    context starts over) and returns the draft's ids for their text: its BOS where its
    tokenizer adds one, the ids of the text up to the last safe boundary (kept), and the tail's
    ids (re-encoded each call). The target's BOS is left out of the text.
    """

    def __init__(self, target_tokenizer: Any, draft_tokenizer: Any) -> None:
        self.target_tok = target_tokenizer
        self.draft_tok = draft_tokenizer
        self.prefix = _special_prefix(draft_tokenizer)
        self._bos = getattr(target_tokenizer, "bos_token_id", None)
        self.reset()

    def reset(self) -> None:
        self.target_ids: list[int] = []  # the committed ids seen so far
        self.done = 0  # of them, those decoded into ``text``
        self.skip = 0  # leading target ids left out of the text (its BOS)
        self.text = ""  # their text, but for a character still open at the end
        self.stable_ids: list[int] = []  # the draft's ids of text[:stable_end]
        self.stable_end = 0
        self.tail_ids: list[int] = []  # the draft's ids of text[stable_end:]
        self.ids: list[int] = list(self.prefix)  # prefix + stable + tail
        # How many leading ids the last sync left as the sync before it returned them.
        self.unchanged = 0

    def _decode(self, ids: Sequence[int]) -> str:
        return str(self.target_tok.decode(list(ids), skip_special_tokens=False,
                                          clean_up_tokenization_spaces=False))

    def _encode(self, text: str) -> list[int]:
        return [int(i) for i in self.draft_tok(text, add_special_tokens=False)["input_ids"]]

    def _extend_text(self) -> bool:
        """Decode the target ids past ``done`` onto ``text``; False if it did not grow.

        A character whose bytes are not all in yet decodes as U+FFFD at the end: it stays out
        of ``text`` until its last byte comes (the window's text is compared without it too).
        """
        ids, n = self.target_ids, self.done
        if len(ids) == n:
            return False
        a = max(self.skip, n - DECODE_WINDOW)
        before = self._decode(ids[a:n]) if n > a else ""
        while a > self.skip and before.startswith(REPLACEMENT) and a > n - 2 * DECODE_WINDOW:
            a -= 1  # the window starts inside a character: start it earlier
            before = self._decode(ids[a:n])
        before = _closed(before)
        full = self._decode(ids[a:])
        old: str | None = self.text
        if full.startswith(before):
            self.text = _closed(self.text + full[len(before):])
        else:  # the window decodes otherwise than the whole text: decode it all
            self.text = _closed(self._decode(ids[self.skip:]))
            self.stable_ids, self.stable_end = [], 0
            old = None
        self.done = len(ids)
        return self.text != old

    def sync(self, target_ids: Sequence[int]) -> list[int]:
        """The draft's ids for the text of ``target_ids`` (see the class docstring)."""
        old = len(self.target_ids)
        if len(target_ids) < old or list(target_ids[:old]) != self.target_ids:
            self.reset()
            old = 0
        self.target_ids.extend(int(i) for i in target_ids[old:])
        if old == 0 and self.target_ids and self.target_ids[0] == self._bos:
            self.skip = self.done = 1
        if not self._extend_text():
            return self.ids
        cut = _last_cut(self.text, self.stable_end)
        if cut < 0 and len(self.text) - self.stable_end > TAIL_LIMIT:
            cut = len(self.text) - TAIL_LIMIT // 2
        self.unchanged = len(self.prefix) + len(self.stable_ids)
        if cut > self.stable_end:
            self.stable_ids += self._encode(self.text[self.stable_end:cut])
            self.stable_end = cut
        self.tail_ids = self._encode(self.text[self.stable_end:])
        self.ids = self.prefix + self.stable_ids + self.tail_ids
        return self.ids


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CrossTokenizerDrafter(ModelBackedDrafter):
    """The draft model q reading and proposing in its own vocabulary, over the shared strings."""

    name = "cross-tokenizer"
    # Re-tokenising the tail costs a little on top of the draft's step.
    PRIOR = ModelDrafter.PRIOR
    STEP_COST = ModelDrafter.STEP_COST

    def __init__(self, model: Any, vocab: SharedVocab, text: DraftText, probs: Probs,
                 greedy: bool, *, runner: ModelRunner = CachedModel) -> None:
        self.lm = runner(model, vocab.draft_size, None, 0, fast=True)
        self.vocab = vocab
        self.text = text
        self.probs = probs
        self.greedy = greedy
        self._mask = ~vocab.draft_shared.to(self.lm.device)  # (V_draft,) True: not shared
        self._fed = 0  # the draft's context length when the last proposal was made

    def plan(self, context: Sequence[int]) -> Plan:
        return Plan("model", "model", prior=self.PRIOR, step_cost=self.STEP_COST, confident=True)

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        """Up to K tokens from q over the shared vocabulary, as the target's ids."""
        ids = self.text.sync(context)
        self._fed = len(ids)
        if not ids:  # no text yet and no BOS of its own: the draft has nothing to read
            return Proposal((), torch.zeros(0, self.vocab.target_size), "model")
        # The cache holds the last sync's ids (and kept drafts): compare past what is unchanged.
        start = min(self.text.unchanged, self.lm.length)
        keep = start + _common_prefix(self.lm.ids[start:], ids[start:])
        if keep == len(ids):  # everything cached: run the last id again for its logits
            keep -= 1
        self.lm.crop(keep)
        feed = ids[keep:]
        rows: list[torch.Tensor] = []
        tokens: list[int] = []
        confidence: list[float] = []
        for i in range(k):
            logits = self.lm.feed(feed, keep=1)[0]  # (V_draft,)
            # Only strings the target also has may be proposed: q is zero elsewhere.
            logits = logits.masked_fill(self._mask, float("-inf"))
            q = self.probs(logits).cpu()  # (V_draft,)
            j = int(q.argmax()) if self.greedy else rng.draw(q)
            rows.append(q)
            tokens.append(int(self.vocab.draft_to_target[j]))
            confidence.append(float(torch.softmax(logits.detach().float(), -1).max())
                              if self.greedy else float(q[j]))
            if go_on is not None and i + 1 < k and not go_on(i + 1, confidence[-1]):
                break
            feed = [j]
        q_rows = (self.vocab.to_target_rows(torch.stack(rows)) if rows
                  else torch.zeros(0, self.vocab.target_size))  # (n, V_target)
        return Proposal(tuple(tokens), q_rows, "model", tuple(confidence))

    def update(self, n_kept: int) -> None:
        # The kept drafts are the draft's own ids of the text that follows: they stay cached
        # (the next sync re-encodes the tail and crops where its ids differ).
        self.lm.crop(min(self.lm.length, self._fed + n_kept))


def build_cross_tokenizer_drafter(pair: ModelPair, s: Settings, tools: DraftTools,
                                  cls: type[CrossTokenizerDrafter] = CrossTokenizerDrafter
                                  ) -> tuple[Drafter, str]:
    """The draft model on its own tokenizer (a pair sharing one: the model drafter; ``cls``:
    a variant, for tests)."""
    if pair.draft_tokenizer is None:
        return build_model_drafter(pair, s, tools)
    vocab = pair.shared_vocab
    assert vocab is not None  # ModelPair builds it with the draft's tokenizer
    t_draft = s.temperature * pair.draft_temperature_scale

    def probs(logits: torch.Tensor) -> torch.Tensor:
        return tools.warp(logits, t_draft, s.top_k, s.top_p)

    text = DraftText(pair.tokenizer, pair.draft_tokenizer)
    drafter = cls(pair.draft, vocab, text, probs, s.temperature == 0, runner=tools.runner)
    return drafter, f"{pair.draft_name or 'draft'} (own tokenizer)"
