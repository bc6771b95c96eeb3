"""Streaming text token by token keeps multi-byte characters whole."""

from __future__ import annotations

from specviz.core.text import REPLACEMENT, IncrementalDetokenizer, TokenTexts
from tests.tiny import byte_tokenizer

TEXT = "推测解码 🙂🚀 café naïve, speculative 解码!"


def test_incremental_text_equals_full_decode_and_never_splits_characters() -> None:
    tok = byte_tokenizer()
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(TEXT) // 2  # the tokenizer really splits characters into bytes
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push(i) for i in ids]
    pieces.append(detok.flush())
    assert "".join(pieces) == TEXT == detok.text
    assert not any(REPLACEMENT in piece for piece in pieces)
    assert "" in pieces  # some tokens completed no character by themselves


def test_prefix_context_is_kept_for_spacing() -> None:
    tok = byte_tokenizer()
    prompt = tok("speculative", add_special_tokens=False)["input_ids"]
    rest = tok(" decoding 解码", add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(tok, prompt)
    out = "".join(detok.push(i) for i in rest) + detok.flush()
    assert out == " decoding 解码"


def test_single_token_texts_show_partial_bytes_readably() -> None:
    tok = byte_tokenizer()
    texts = TokenTexts(tok)
    ids = tok("🙂", add_special_tokens=False)["input_ids"]
    shown = [texts(i) for i in ids]
    if len(ids) > 1:  # a split emoji: each piece is shown as its bytes, not as U+FFFD
        assert all(REPLACEMENT not in s for s in shown)
        assert any("⟨" in s for s in shown)
    assert texts(ids[0]) is texts(ids[0])  # cached
