"""Drafting across tokenizers (core/cross_tokenizer.py): exact, and the draft's own text right.

Byte-level BPE tokenizers are trained here, offline, on a few paragraphs, the target's and
the draft's on different texts and to different sizes, so each has merges the other lacks:
- on English, Chinese and emoji (every byte a token) for the shared vocabulary and the draft's
  incremental re-tokenisation, checked against re-encoding the whole text;
- on paragraphs over the letters a, b, c (12 and 11 tokens) for the exact enumeration of
  test_enumeration.py, with tiny random Llamas reading each: the law of the engine's output
  over the next few tokens must be the target's own, at T > 0 with no top-k.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from specviz.core import cross_tokenizer as xt
from specviz.core.engine import SpeculativeDecoder, encode_prompt
from specviz.core.errors import TokenizerMismatchError
from specviz.core.events import Event, Round, Settings
from specviz.core.models import LoadedModel, ModelPair, check_tokenizers
from specviz.core.parts import Factory
from specviz.core.registry import Entry
from specviz.core.rng import TorchRandom
from tests.core.test_enumeration import (
    TV_BOUND,
    Forcing,
    PrefixLM,
    deterministic,
    enumerate_law,
    target_law,
    total_variation,
)
from tests.core.test_enumeration import engine_mod as engine_mod
from tests.mutation import mutant
from tests.plain import plain
from tests.tiny import tiny_llama

# A few paragraphs: the target learns its merges from the first two, the draft from the last
# two, so " cat" and " mat" are whole words to the target only, " draft" to the draft only.
PARAGRAPHS = [
    "the cat sat on the mat.\n\n  the dog ran to the red sun.\n\n  a big dog sat in the "
    "sun, and the cat ran on and on.\n\n  the sun is red;\n\n  the mat is big.\n\n## end",
    "the target model keeps its own distribution: a draft it would not write is rejected, "
    "and the token it writes instead comes from the residual. 目标模型保持自己的分布。",
    "speculative decoding drafts tokens with a small model and the big model checks them all "
    "at once. 推测解码先起草，再验证。 emoji 🙂🚀 café",
    "the draft reads the text its own way:\n\n  tokens it cannot share with the target are "
    "never proposed,\n\n  so the cat and the dog\n\n  still sat in the sun.",
]


def bpe(corpus: list[str], size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE (every byte a token: any text encodes) that adds <s> before text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[
        ("<s>", tok.token_to_id("<s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def target_tokenizer() -> PreTrainedTokenizerFast:
    return bpe(PARAGRAPHS[:2], 330)


def draft_tokenizer() -> PreTrainedTokenizerFast:
    return bpe(PARAGRAPHS[2:], 300)


# Paragraphs over a, b, c: the target merges "cab" and " cab", the draft " ab" and " bab".
ABC_TARGET = ["a cab a cab abc abc cab", "cab a cab a abc"]
ABC_DRAFT = ["bab bab ab ab aba baba bac bac", "ca ca ab ab"]
ABC_PROMPT = "a cab"


def abc_tokenizer(corpus: list[str], size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE over the paragraph's own characters only: a vocabulary of ``size``."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=size, special_tokens=["<s>", "</s>"], show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[
        ("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def make_pair(memo: bool = True) -> ModelPair:
    """Tiny random Llamas on the a-b-c tokenizers (12 and 11 ids, 7 of them shared)."""
    t_tok, d_tok = abc_tokenizer(ABC_TARGET, 12), abc_tokenizer(ABC_DRAFT, 11)
    wrap = PrefixLM if memo else (lambda m: m)
    target = tiny_llama(len(t_tok), seed=2, hidden=16, layers=1, sharpness=3.0)
    draft = tiny_llama(len(d_tok), seed=1, hidden=16, layers=1, sharpness=3.0)
    return ModelPair(target=wrap(target), draft=wrap(draft), tokenizer=t_tok,
                     draft_tokenizer=d_tok, target_name="tiny-target", draft_name="tiny-draft")


PAIRS: dict[str, ModelPair] = {}


def pair_for(name: str) -> ModelPair:
    if name not in PAIRS:
        PAIRS[name] = {"memo": make_pair, "real caches": lambda: make_pair(memo=False)}[name]()
    return PAIRS[name]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------
# The shared vocabulary.


def test_shared_vocabulary_maps_equal_strings_both_ways() -> None:
    t_tok, d_tok = target_tokenizer(), draft_tokenizer()
    vocab = xt.SharedVocab.build(t_tok, d_tok, len(t_tok), len(d_tok))
    t_vocab, d_vocab = t_tok.get_vocab(), d_tok.get_vocab()
    d_strings = {i: s for s, i in d_vocab.items()}
    t_strings = {i: s for s, i in t_vocab.items()}
    shared = set(t_vocab) & set(d_vocab)
    assert vocab.size == len(shared) and 256 < vocab.size < min(len(t_tok), len(d_tok))
    for d_id, t_id in zip(vocab.shared_draft_ids.tolist(), vocab.shared_target_ids.tolist(),
                          strict=True):
        assert d_strings[d_id] == t_strings[t_id]
        assert int(vocab.target_to_draft[t_id]) == d_id
    # Each side has strings the other lacks: merges learnt from its own paragraphs.
    assert "Ġdraft" in set(d_vocab) - set(t_vocab)
    assert "Ġmat" in set(t_vocab) - set(d_vocab)
    # q over the draft's ids -> the target's, zero outside the shared vocabulary.
    q = torch.softmax(torch.randn(2, vocab.draft_size, dtype=torch.float64), -1)
    wide = vocab.to_target_rows(q)
    assert wide.shape == (2, len(t_tok))
    assert float(wide[:, ~vocab.target_shared].abs().sum()) == 0.0
    assert torch.allclose(wide.sum(-1), q[:, vocab.draft_shared].sum(-1))


def test_report_counts_target_tokens_outside_the_shared_vocabulary() -> None:
    t_tok, d_tok = target_tokenizer(), draft_tokenizer()
    vocab = xt.SharedVocab.build(t_tok, d_tok, len(t_tok), len(d_tok))
    ids = t_tok("the mat is big", add_special_tokens=False)["input_ids"]
    outside = [i for i in ids if int(vocab.target_to_draft[i]) < 0]
    report = vocab.report(ids)
    assert (report.counted, report.outside) == (len(ids), len(outside)) and outside
    assert report.outside_share == pytest.approx(len(outside) / len(ids))
    assert f"{vocab.size:,} of the target's {len(t_tok):,} tokens" in report.text()
    assert vocab.report([*range(len(t_tok)), 10**6], recent=10).counted == 9  # recent, in range


def test_check_tokenizers_accepts_another_tokenizer_only_for_the_cross_drafter() -> None:
    target = LoadedModel(model=None, tokenizer=target_tokenizer(), name="t")
    draft = LoadedModel(model=None, tokenizer=draft_tokenizer(), name="d")
    with pytest.raises(TokenizerMismatchError, match="--drafter cross-tokenizer"):
        check_tokenizers(target, draft)
    shared = check_tokenizers(target, draft, cross_tokenizer=True)
    assert shared is not None and shared.size > 256
    same = LoadedModel(model=None, tokenizer=target_tokenizer(), name="t2")
    assert check_tokenizers(target, same, cross_tokenizer=True) is None  # one tokenizer
    # No string in common: nothing could ever be proposed.
    words = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(
        {"[x]": 0, "[y]": 1}, unk_token="[x]")), unk_token="[x]")
    with pytest.raises(TokenizerMismatchError, match="no token string in common"):
        check_tokenizers(target, LoadedModel(model=None, tokenizer=words, name="w"),
                         cross_tokenizer=True)


# ---------------------------------------------------------------------------------------------
# The draft's own tokenization, kept incrementally, against re-encoding the whole text.

STREAM = " ".join(PARAGRAPHS) + "\n\nthe cat  sat\n on 🙂🙂 the  mat.\n## a\n\n\n## b 推测解码"


def retokenisation_errors(cls: type[xt.DraftText] = xt.DraftText, trials: int = 12) -> list[str]:
    """Where the incremental ids differ from the draft's encoding of the whole decoded text,
    the committed ids arriving in random chunks of 1-4 (a character's bytes often split)."""
    t_tok, d_tok = target_tokenizer(), draft_tokenizer()
    ids = t_tok(STREAM)["input_ids"]  # <s> first: left out of the text
    errors: list[str] = []
    rng = random.Random(0)
    for trial in range(trials):
        text = cls(t_tok, d_tok)
        n = rng.randint(1, 6)
        while n <= len(ids):
            got = text.sync(ids[:n])
            # The whole text so far, but for a character whose bytes are not all in yet.
            whole = xt._closed(t_tok.decode(ids[1:n], clean_up_tokenization_spaces=False))
            want = d_tok(whole)["input_ids"]
            if text.text != whole or got != want:
                errors.append(f"trial {trial}, {n} ids: {text.text[-8:]!r} {got[-6:]} != "
                              f"{whole[-8:]!r} {want[-6:]}")
            n += rng.randint(1, 4)
    return errors


def test_incremental_retokenisation_equals_encoding_the_whole_text() -> None:
    assert retokenisation_errors() == []


def test_retokenisation_check_catches_a_split_character_read_too_early() -> None:
    """Broken: ids ending in part of a character are decoded at once (U+FFFD in the text)."""
    broken = mutant(xt.DraftText, ("_closed(self.text + full[len(before):])",
                                   "self.text + full[len(before):]"))
    assert retokenisation_errors(broken)


def test_retokenisation_check_catches_a_cut_inside_a_word() -> None:
    """Broken: the kept text is cut before the last character, wherever that falls."""
    broken = mutant(xt.DraftText, ("cut = _last_cut(self.text, self.stable_end)",
                                   "cut = len(self.text) - 1"))
    assert retokenisation_errors(broken)


def test_retokenisation_check_catches_a_cut_after_a_run_of_line_breaks() -> None:
    """Broken: the kept text may end in "\\n\\n" (cut before "##"): alone it encodes as one
    piece, "ĊĊ", where the whole text has "Ċ", "Ċ" (the run is split before a non-space)."""
    assert "ĊĊ" in draft_tokenizer().get_vocab()
    broken = mutant(xt.DraftText, (
        "cut = _last_cut(self.text, self.stable_end)",
        "cut = next((c for c in range(len(self.text) - 2, self.stable_end, -1)\n"
        "                    if not self.text[c + 1].isspace() and (self.text[c] == ' ' or (\n"
        "                        self.text[c - 1] == '\\n' and not self.text[c].isspace()))),"
        " -1)"))
    assert retokenisation_errors(broken)


def test_incremental_retokenisation_reencodes_only_the_tail() -> None:
    t_tok, d_tok = target_tokenizer(), draft_tokenizer()
    ids = t_tok(STREAM)["input_ids"]
    encoded: list[int] = []

    class Counting(xt.DraftText):
        def _encode(self, text: str) -> list[int]:
            encoded.append(len(text))
            return super()._encode(text)

    text = Counting(t_tok, d_tok)
    for n in range(2, len(ids) + 1):
        text.sync(ids[:n])
    assert text.stable_end > 0.9 * len(text.text)
    # One sync re-encodes a few words, never the text so far.
    assert max(encoded) < 60 < len(text.text)


# ---------------------------------------------------------------------------------------------
# Exactness: the output law equals the target's.


def engine_law(pair: ModelPair, s: Settings, factory: Factory | None = None,
               merge: bool = True) -> dict[tuple[int, ...], float]:
    parts = deterministic(factory)

    def start(rng: Forcing) -> Iterator[Event]:
        return SpeculativeDecoder(pair, s, factory=parts).run(ABC_PROMPT, rng=rng)  # type: ignore[arg-type]

    return enumerate_law(start, merge=merge)


def reference_law(pair: ModelPair, s: Settings) -> dict[tuple[int, ...], float]:
    target = pair.target if isinstance(pair.target, PrefixLM) else PrefixLM(pair.target)
    prompt = tuple(encode_prompt(pair.tokenizer, ABC_PROMPT))
    return target_law(target, prompt, pair.vocab_size, s, engine_mod._eos_ids(pair))


def settings(k: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
             n: int | None = None, **kw: Any) -> Settings:
    return plain(k=k, temperature=temperature, top_k=top_k, top_p=top_p,
                 max_new_tokens=n or k + 1, top_n=1, seed=0, drafter="cross-tokenizer", **kw)


CASES: dict[str, tuple[str, Settings, bool]] = {  # pair, settings, merge
    "K 1, T 1": ("memo", settings(1, 1.0), True),
    "K 2, T 0.8, top-k 4, top-p 0.9": ("memo", settings(2, 0.8, top_k=4, top_p=0.9), True),
    "K 3, T 0, 5 tokens": ("memo", settings(3, 0.0, n=5), True),
    "cost K, K 2, 4 tokens, T 1, top-k 2": ("memo", settings(2, 1.0, top_k=2, n=4,
                                                             k_policy="cost"), True),
    "real KV caches, K 1, T 1, top-k 3, whole tree": ("real caches", settings(1, 1.0, top_k=3),
                                                      False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_output_law_is_the_targets(name: str) -> None:
    pair_name, s, merge = CASES[name]
    pair = pair_for(pair_name)
    tv = total_variation(engine_law(pair, s, merge=merge), reference_law(pair, s))
    assert tv < TV_BOUND, f"{name}: total variation {tv:.2e}"


def with_drafter(cls: type[xt.CrossTokenizerDrafter]) -> Factory:
    return Factory().with_drafters(Entry(
        "cross-tokenizer", "", lambda pair, s, tools: xt.build_cross_tokenizer_drafter(
            pair, s, tools, cls), needs_draft_model=True, cross_tokenizer=True))


# Broken: q is not masked to the shared vocabulary, so the draft may draw a token whose string
# the target lacks; it is proposed as the first target token of its text, and verify is handed
# q mapped over the shared strings (what such a drafter would naturally do).
UNMASKED_DRAFTER = mutant(xt.CrossTokenizerDrafter, (
    '            logits = logits.masked_fill(self._mask, float("-inf"))\n', ""), (
    "tokens.append(int(self.vocab.draft_to_target[j]))",
    "tokens.append(int(self.vocab.draft_to_target[j]) if self.vocab.draft_shared[j] else "
    "int(self.text.target_tok(self.text.draft_tok.decode([j]), add_special_tokens=False)"
    "['input_ids'][0]))"))
UNMASKED = with_drafter(UNMASKED_DRAFTER)


def test_enumeration_catches_a_token_outside_the_shared_vocabulary() -> None:
    pair, s = pair_for("memo"), CASES["K 1, T 1"][1]
    tv = total_variation(engine_law(pair, s, UNMASKED), reference_law(pair, s))
    assert tv > 1e3 * TV_BOUND, f"an unshared draft token went unnoticed: TV {tv:.2e}"


def run_rounds(pair: ModelPair, s: Settings, seeds: range, factory: Factory | None = None
               ) -> list[Round]:
    rounds: list[Round] = []
    for seed in seeds:
        decoder = SpeculativeDecoder(pair, replace(s, seed=seed), factory=factory)
        rounds += [e for e in decoder.run(ABC_PROMPT, rng=TorchRandom(seed))
                   if isinstance(e, Round)]
    return rounds


def test_the_case_is_not_trivial() -> None:
    """The draft reads other ids than the target, drafts are both kept and rejected, and only
    shared tokens are proposed, with q zero elsewhere (the unmasked draft puts mass there)."""
    pair = pair_for("memo")
    vocab = pair.shared_vocab
    assert vocab is not None
    t_ids = encode_prompt(pair.tokenizer, ABC_PROMPT)
    d_ids = xt.DraftText(pair.tokenizer, pair.draft_tokenizer).sync(t_ids)
    assert len(d_ids) != len(t_ids)  # " cab" is one token to the target, three to the draft
    proposals: list[Any] = []

    def spying(cls: type[xt.CrossTokenizerDrafter]) -> Factory:
        class Spy(cls):  # type: ignore[valid-type, misc]
            def propose(self, *a: Any, **kw: Any) -> Any:
                proposals.append(super().propose(*a, **kw))
                return proposals[-1]

        return with_drafter(Spy)

    s = settings(2, 1.0, n=12)
    statuses = {d.status for r in run_rounds(pair, s, range(6), spying(xt.CrossTokenizerDrafter))
                for d in r.drafted}
    assert {"accepted", "rejected"} <= statuses
    assert all(bool(vocab.target_shared[x]) for p in proposals for x in p.tokens)
    assert all(torch.allclose(p.q_rows.sum(-1), torch.ones(len(p.tokens), dtype=p.q_rows.dtype))
               for p in proposals)
    proposals.clear()
    run_rounds(pair, s, range(6), spying(UNMASKED_DRAFTER))
    lost = [float(row.sum()) for p in proposals for row in p.q_rows]
    assert min(lost) < 0.99, "the unmasked draft never put mass outside the shared vocabulary"


def draft_context_errors(cls: type[xt.CrossTokenizerDrafter]) -> list[str]:
    """Rounds where the draft's cache, when it drafts, does not hold its own tokenization of
    the committed text (the draft would read other text than the target wrote: still exact,
    but a wrong q). Checked against the draft's tokenizer on the decoded text."""
    errors: list[str] = []

    class Checked(cls):  # type: ignore[valid-type, misc]
        def propose(self, context: Any, *a: Any, **kw: Any) -> Any:
            proposal = super().propose(context, *a, **kw)
            text = self.text.target_tok.decode(list(context)[1:],
                                               clean_up_tokenization_spaces=False)
            want = self.text.draft_tok(xt._closed(text))["input_ids"]
            held = self.lm.ids[:len(want)]
            if held != want or self.lm.length < len(want):
                errors.append(f"{len(context)} ids: cache {held} != {want}")
            return proposal

    run_rounds(pair_for("real caches"), settings(3, 1.0, n=16), range(4), with_drafter(Checked))
    return errors


def test_the_draft_reads_its_own_tokenization_of_the_committed_text() -> None:
    assert draft_context_errors(xt.CrossTokenizerDrafter) == []


def test_draft_context_check_catches_a_cache_not_cropped_to_the_new_ids() -> None:
    """Broken: the cache is kept up to its length, never compared with the re-encoded tail."""
    broken = mutant(xt.CrossTokenizerDrafter, (
        "start = min(self.text.unchanged, self.lm.length)", "start = self.lm.length"))
    assert draft_context_errors(broken)
