"""Tiny random-weight models and tokenizers built in-process: tests never download."""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specviz.core.models import ModelPair

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "red", "big", "sun"]


def word_tokenizer(words: list[str] = WORDS, eos: bool = True) -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer: <s>=0, </s>=1, <unk>=2, then ``words``."""
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2}
    for w in words:
        vocab[w] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                   eos_token="</s>" if eos else None, unk_token="<unk>")


CORPUS = [
    "speculative decoding makes a large model faster without changing its output",
    "推测解码让大模型更快，而且输出分布不变。小模型先起草，大模型一次验证。",
    "emoji 🙂🚀 and accents: café, naïve, Zürich",
] * 3


def byte_tokenizer(vocab_size: int = 300) -> PreTrainedTokenizerFast:
    """A byte-level BPE (GPT-2 style): Chinese characters and emoji span several tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def tiny_llama(vocab_size: int, seed: int, hidden: int = 32, layers: int = 2,
               sharpness: float = 1.0, dtype: torch.dtype = torch.float64,
               max_positions: int = 256) -> LlamaForCausalLM:
    """A random Llama; ``sharpness`` scales the LM head so distributions are not near-uniform."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=max_positions, bos_token_id=0, eos_token_id=1,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
    model.generation_config.eos_token_id = None  # EOS comes from the tokenizer, if it has one
    return model.to(dtype).eval()


def tiny_pair(tokenizer: Any | None = None, draft_seed: int = 1, target_seed: int = 2,
              sharpness: float = 1.0, **kw: Any) -> ModelPair:
    """Draft and target: two different random Llamas on one tokenizer."""
    tokenizer = tokenizer or word_tokenizer()
    vocab = len(tokenizer)
    return ModelPair(
        target=tiny_llama(vocab, target_seed, sharpness=sharpness, **kw),
        draft=tiny_llama(vocab, draft_seed, sharpness=sharpness, **kw),
        tokenizer=tokenizer, target_name="tiny-target", draft_name="tiny-draft",
    )
