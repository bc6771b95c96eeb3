"""Loading models and pairs: folders, clear errors, the tokenizer check."""

from __future__ import annotations

from pathlib import Path

import pytest

from specviz.core.errors import ModelLoadError, TokenizerMismatchError
from specviz.core.models import LoadedModel, check_tokenizers, load_model, load_pair
from tests.tiny import byte_tokenizer, tiny_llama, word_tokenizer


def save_tiny(folder: Path, tokenizer: object, seed: int) -> Path:
    model = tiny_llama(len(tokenizer), seed=seed)  # type: ignore[arg-type]
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)  # type: ignore[attr-defined]
    return folder


def test_pair_loads_from_folders(tmp_path: Path) -> None:
    tok = word_tokenizer()
    target = save_tiny(tmp_path / "t", tok, 2)
    draft = save_tiny(tmp_path / "d", tok, 1)
    pair = load_pair(str(draft), str(target), device="cpu", progress=lambda s: None)
    assert pair.draft is not None and pair.vocab_size == len(tok)
    assert pair.draft_name == "d" and pair.target_name == "t"


def test_unknown_hub_id_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache"):
        load_model("no-such-org/no-such-model-xyz", device="cpu")


def test_missing_paths_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        load_model(str(tmp_path / "nothing.gguf"))
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelLoadError, match="not a model folder"):
        load_model(str(tmp_path / "notes.txt"))
    # A path that does not exist is not looked up on the hub as a (mangled) repo id.
    with pytest.raises(ModelLoadError, match="No model folder or .gguf file at"):
        load_model(str(tmp_path / "no-such-folder"))


def test_unknown_device_is_refused() -> None:
    with pytest.raises(ModelLoadError, match="Unknown device"):
        load_model("whatever", device="tpu")


def test_different_tokenizers_are_refused_naming_both() -> None:
    words, other = word_tokenizer(), byte_tokenizer()
    a = LoadedModel(model=None, tokenizer=words, name="alpha-target")
    b = LoadedModel(model=None, tokenizer=other, name="beta-draft")
    with pytest.raises(TokenizerMismatchError, match="beta-draft.*alpha-target"):
        check_tokenizers(a, b)
    # Same vocabulary built twice is fine.
    check_tokenizers(a, LoadedModel(model=None, tokenizer=word_tokenizer(), name="c"))


def test_load_pair_refuses_mismatched_folders(tmp_path: Path) -> None:
    target = save_tiny(tmp_path / "t", word_tokenizer(), 2)
    draft = save_tiny(tmp_path / "d", word_tokenizer(["x", "y", "z"]), 1)
    with pytest.raises(TokenizerMismatchError, match="different tokenizers"):
        load_pair(str(draft), str(target), device="cpu")
