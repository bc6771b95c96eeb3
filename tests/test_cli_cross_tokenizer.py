"""A draft with its own tokenizer from the CLI and the presets: loaded only for the
cross-tokenizer drafter, the shared vocabulary in the header, presets listed and marked as
downloads (nothing is downloaded: the hub is never asked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from specviz import cli
from specviz.core import registry
from specviz.core.engine import SpeculativeDecoder
from specviz.core.errors import InputError
from specviz.core.models import ModelSource, load_pair, preset_availability
from specviz.core.presets import CROSS_TOKENIZER_DRAFTER, CROSS_TOKENIZER_PRESETS, PRESETS
from tests.core.test_cross_tokenizer import ABC_DRAFT, ABC_TARGET, abc_tokenizer
from tests.plain import plain
from tests.tiny import tiny_llama


@pytest.fixture(scope="module")
def cross_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(draft, target) folders: tiny Llamas on the a-b-c tokenizers (11 and 12 ids)."""
    base = tmp_path_factory.mktemp("cross")
    folders = []
    for name, tok, seed in (("draft", abc_tokenizer(ABC_DRAFT, 11), 1),
                            ("target", abc_tokenizer(ABC_TARGET, 12), 2)):
        tiny_llama(len(tok), seed=seed, dtype=torch.float32, sharpness=3.0).save_pretrained(
            base / name)
        tok.save_pretrained(base / name)
        folders.append(base / name)
    return folders[0], folders[1]


def test_the_pair_loads_for_the_cross_drafter_alone(cross_models: tuple[Path, Path]) -> None:
    draft, target = map(str, cross_models)
    pair = load_pair(draft, target, device="cpu", cross_tokenizer=True)
    assert pair.cross_tokenizer and pair.shared_vocab is not None
    assert pair.vocab_size == 12 and pair.shared_vocab.size == 8
    # The drafters that read the target's ids cannot use it: one clear line, before any run.
    with pytest.raises(InputError, match="tokenizer of its own.*cross-tokenizer drafter can"):
        SpeculativeDecoder(pair, plain(k=2))
    SpeculativeDecoder(pair, plain(k=2, drafter="lookup"))  # needs no draft: fine
    assert registry.DRAFTERS[CROSS_TOKENIZER_DRAFTER].cross_tokenizer


def test_cli_header_names_the_shared_vocabulary(cross_models: tuple[Path, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    draft, target = map(str, cross_models)
    common = ["--draft", draft, "--target", target, "--prompt", "a cab", "--no-chat",
              "--max-new-tokens", "6", "--temperature", "1", "--k-policy", "fixed", "--k", "2"]
    assert cli.main([*common, "--drafter", CROSS_TOKENIZER_DRAFTER]) == 0
    out = capsys.readouterr().out
    header = [line for line in out.splitlines() if line.startswith("# across tokenizers")]
    assert len(header) == 2, out
    assert header[0].startswith("# across tokenizers: 8 of the target's 12 tokens shared with "
                                "the draft's 11; ")
    assert "of the prompt's 3 target tokens lie outside it" in header[0]
    assert "generated tokens" in header[1] and "outside the shared vocabulary" in header[1]
    # Any other drafter that needs the draft: refused at load, saying what would work.
    assert cli.main([*common, "--drafter", "model"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("# ")]
    assert len(err) == 1 and "--drafter cross-tokenizer" in err[0], err


def test_cross_presets_are_listed_and_marked_as_downloads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: nothing is there
    assert len(CROSS_TOKENIZER_PRESETS) >= 2
    assert not set(CROSS_TOKENIZER_PRESETS) & set(PRESETS)  # not in the app's list yet
    targets = {target for _draft, target in CROSS_TOKENIZER_PRESETS.values()}
    assert {"Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"} <= targets
    for name, (draft, _target) in CROSS_TOKENIZER_PRESETS.items():
        assert "(hub" in name and "across tokenizers" in name
        assert draft == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert set(preset_availability(CROSS_TOKENIZER_PRESETS).values()) == {"download"}
    for name in CROSS_TOKENIZER_PRESETS:  # the CLI takes each
        assert cli.build_parser().parse_args(["--pair", name]).pair == name


def test_a_cross_preset_runs_the_cross_drafter_unless_told(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI loads a cross preset accepting the draft's tokenizer and drafts with the
    cross-tokenizer drafter; an explicit --drafter wins. Nothing is loaded or downloaded here."""
    seen: list[tuple[Any, Any, bool]] = []

    def located(spec: str) -> ModelSource:
        return ModelSource(spec, spec, spec, "download")

    def stop(draft: Any, target: Any, *a: Any, cross_tokenizer: bool = False, **kw: Any) -> Any:
        seen.append((draft.spec if draft else None, target.spec, cross_tokenizer))
        raise InputError("stopped before loading")

    monkeypatch.setattr(cli, "locate", located)
    monkeypatch.setattr(cli, "load_pair", stop)
    name = next(iter(CROSS_TOKENIZER_PRESETS))
    draft, target = CROSS_TOKENIZER_PRESETS[name]
    assert cli.main(["--pair", name]) == 2
    assert cli.main(["--pair", name, "--drafter", "lookup"]) == 2
    assert seen == [(draft, target, True), (None, target, False)]
    capsys.readouterr()
