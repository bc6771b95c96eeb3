"""Token ids -> text, token by token, without breaking multi-byte characters."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Streams the text of a growing id list; a split UTF-8 character waits for its last byte.

    Decodes a short window (the last few ids) per step, so cost does not grow with length.
    """

    def __init__(self, tokenizer: Any, prefix_ids: list[int] | None = None) -> None:
        self._tok = tokenizer
        self._ids: list[int] = list(prefix_ids or [])
        # Text before _read is already emitted; _prefix..._read gives context for spacing.
        self._prefix = max(0, len(self._ids) - 5)
        self._read = len(self._ids)
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=True,
                                    clean_up_tokenization_spaces=False))

    def push(self, token_id: int) -> str:
        """Add one id; return the text it completes (possibly "", held back for more bytes)."""
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix:self._read])
        full_text = self._decode(self._ids[self._prefix:])
        if len(full_text) > len(prefix_text) and not full_text.endswith(REPLACEMENT):
            new = full_text[len(prefix_text):]
            self._prefix, self._read = self._read, len(self._ids)
            self.text += new
            return new
        return ""

    def flush(self) -> str:
        """At the end of a run: whatever is still held back (an incomplete character)."""
        if self._read == len(self._ids):
            return ""
        prefix_text = self._decode(self._ids[self._prefix:self._read])
        full_text = self._decode(self._ids[self._prefix:])
        new = full_text[len(prefix_text):]
        self._prefix = self._read = len(self._ids)
        self.text += new
        return new


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode table (byte-level BPE's printable byte alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


class TokenTexts:
    """The text of single tokens, cached; partial UTF-8 pieces shown as their bytes."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self._cache[token_id] = self._piece(token_id)
        return text

    def _piece(self, token_id: int) -> str:
        text = str(self._tok.decode([token_id], skip_special_tokens=False,
                                    clean_up_tokenization_spaces=False))
        if REPLACEMENT not in text:
            return text
        raw = self._tok.convert_ids_to_tokens(token_id)
        table = _byte_decoder()
        if isinstance(raw, str):
            if raw.startswith("<0x") and raw.endswith(">"):  # SentencePiece byte fallback
                return f"⟨{raw[3:-1].upper()}⟩"
            if all(ch in table for ch in raw):
                data = bytes(table[ch] for ch in raw)
                shown = data.decode("utf-8", errors="backslashreplace")
                return re.sub(r"\\x([0-9a-f]{2})", lambda m: f"⟨{m[1].upper()}⟩", shown)
        return text
