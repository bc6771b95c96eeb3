"""Hostile and careless input, one table (issue 26): each case gives one clear line, no traceback,
and loses nothing (no code runs, no good event dropped, no file touched).

A row builds its input under a temporary folder and runs the code path a user reaches; it
returns what the user is told and what, if anything, was lost. The broken variant of each
fix is shown in the test file of its item (named in the row's ``shown_by``).

CLI rows (``_cli``) run ``specviz.cli.main`` in-process; add rows for the CLI's own checks
(issue 26, item 19) to the table below in the same form.
"""

from __future__ import annotations

import builtins
import io
import traceback
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from specviz.core.errors import SpecvizError
from specviz.core.recording import MAX_LINE_BYTES, ended_early, read_prefix, read_recording
from tests.tiny import tiny_llama, word_tokenizer

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "assets" / "recordings"
NORMAL = RECORDINGS / "normal.jsonl"


@dataclass(frozen=True)
class Told:
    """What a row's user saw: the message, and what was lost ("" when nothing was)."""

    message: str
    lost: str = ""


@dataclass(frozen=True)
class Case:
    item: int  # issue 26's numbering
    name: str
    run: Callable[[Path, pytest.MonkeyPatch], Told]
    expect: str  # in the message
    shown_by: str  # the test file that shows the broken variant failing


def refused(call: Callable[[], object], kinds: type[BaseException] | tuple = SpecvizError) -> str:
    """The message of the refusal ``call`` must raise; a traceback-worthy escape fails."""
    try:
        call()
    except kinds as exc:
        return str(exc)
    except Exception:  # noqa: BLE001 - the point: anything else is a traceback for the user
        pytest.fail("escaped as a traceback:\n" + traceback.format_exc())
    pytest.fail("accepted")


# -- 15: checkpoints -------------------------------------------------------------------------


class _Planted:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return builtins.open, (str(self.marker), "w")


def planted_checkpoint(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    from specviz.distill.train import CKPT, load_checkpoint

    marker = tmp / "code-ran"
    torch.save({"model": {}, "opt": {}, "step": 1, "history": [], "x": _Planted(marker)},
               tmp / CKPT)
    size = (tmp / CKPT).stat().st_size
    message = refused(lambda: load_checkpoint(tmp / CKPT))
    lost = "code ran" if marker.exists() else \
        "" if (tmp / CKPT).stat().st_size == size else "the checkpoint was changed"
    return Told(message, lost)


def cut_checkpoint(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    from specviz.distill.train import CKPT, load_checkpoint

    torch.save({"model": {"w": torch.ones(8)}, "opt": {}, "step": 3, "history": []}, tmp / CKPT)
    (tmp / CKPT).write_bytes((tmp / CKPT).read_bytes()[:-200])
    return Told(refused(lambda: load_checkpoint(tmp / CKPT)),
                "" if (tmp / CKPT).is_file() else "the checkpoint was deleted")


# -- 16, 17: recordings ----------------------------------------------------------------------


def prefix_of(path: Path, good: int) -> Told:
    """Read ``path`` as the app and the export do: the first ``good`` events must come back."""
    events, error = read_prefix(path)
    assert error is not None, "accepted"
    whole = read_recording(NORMAL) if path.name.startswith("normal") else \
        read_recording(RECORDINGS / "race.jsonl")
    lost = "" if events == whole[:good] else f"{good - len(events)} good events dropped"
    return Told(ended_early(error, len(events)), lost)


def cut_recording(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    (tmp / "normal-cut.jsonl").write_bytes(NORMAL.read_bytes()[:-200])
    return prefix_of(tmp / "normal-cut.jsonl", 18)


def bad_line_mid_file(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    lines = NORMAL.read_bytes().split(b"\n")
    lines[9] = b'{"type": "round", "index": 8, oops' + lines[9][30:]
    (tmp / "normal-bad.jsonl").write_bytes(b"\n".join(lines))
    return prefix_of(tmp / "normal-bad.jsonl", 9)


def cut_race(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    data = (RECORDINGS / "race.jsonl").read_bytes()
    (tmp / "race-cut.jsonl").write_bytes(data[:len(data) // 2])
    return prefix_of(tmp / "race-cut.jsonl", data[:len(data) // 2].count(b"\n"))


def one_huge_line(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    path = tmp / "huge.jsonl"
    with path.open("wb") as f:
        f.write(NORMAL.read_bytes().split(b"\n")[0] + b"\n")
        block = b" " * (1 << 20)
        for _ in range(MAX_LINE_BYTES // len(block) + 8):  # 40 MiB, no newline
            f.write(block)
    events, error = read_prefix(path)
    assert error is not None, "accepted"
    return Told(ended_early(error, len(events)), "" if len(events) == 1 else "run_started lost")


# -- 20: model folders and files -------------------------------------------------------------


def _load(path: Path, mp: pytest.MonkeyPatch) -> Told:
    """load_model refuses before any loading starts (a from_pretrained call fails the row)."""
    import transformers

    from specviz.core.errors import ModelLoadError
    from specviz.core.models import load_model

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("started loading instead of refusing at once")

    mp.setattr(transformers.AutoTokenizer, "from_pretrained", never)
    mp.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    return Told(refused(lambda: load_model(str(path), device="cpu"), ModelLoadError))


def _tiny_folder(folder: Path, *, weights: bool = True, tokenizer: bool = True) -> Path:
    tok = word_tokenizer()
    tiny_llama(len(tok), seed=1).save_pretrained(folder)
    if not weights:
        (folder / "model.safetensors").unlink()
    if tokenizer:
        tok.save_pretrained(folder)
    return folder


def empty_folder(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    (tmp / "empty").mkdir()
    return _load(tmp / "empty", mp)


def folder_of_a_gguf(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    (tmp / "m").mkdir()
    (tmp / "m" / "model.Q4.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    return _load(tmp / "m", mp)


def config_without_weights(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    return _load(_tiny_folder(tmp / "m", weights=False), mp)


def weights_without_tokenizer(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    return _load(_tiny_folder(tmp / "m", tokenizer=False), mp)


def text_named_gguf(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    (tmp / "model.gguf").write_text("<html>404 Not Found</html>\n")
    return _load(tmp / "model.gguf", mp)


def empty_gguf(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    (tmp / "model.gguf").write_bytes(b"")
    return _load(tmp / "model.gguf", mp)


def _cli(*argv: str) -> Told:
    """``specviz-cli ARGV`` in-process: its one stderr line (progress lines left out)."""
    from specviz import cli

    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        try:
            cli.main(list(argv))
        except SystemExit:
            pass
    lines = [line for line in err.getvalue().splitlines() if not line.startswith("# ")]
    return Told("\n".join(lines))


def cli_empty_folder(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    (tmp / "empty").mkdir()
    mp.setenv("HF_HUB_OFFLINE", "1")
    return _cli("--json", "--target", str(tmp / "empty"), "--draft", str(tmp / "empty"))


# -- 19: the CLI's own checks, before any model loads (the target named does not exist: a
# refusal that came after loading would name it instead) -----------------------------------


def _cli_refusal(*argv: str) -> Callable[[Path, pytest.MonkeyPatch], Told]:
    def run(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
        mp.setenv("HF_HUB_OFFLINE", "1")
        args = [a.replace("TMP", str(tmp)) for a in argv]
        if "TMP/bad.txt" in argv:
            (tmp / "bad.txt").write_bytes(b"caf\xe9 au lait")
        return _cli("--target", str(tmp / "no-such-model"), *args)
    return run


# -- 21: the cache folder is not a folder ---------------------------------------------------


def cache_is_a_file(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    """SPECVIZ_CACHE names a file: the model still loads (its CPU timings are just not kept)."""
    from specviz.core.models import load_model

    (tmp / "cache").write_text("not a folder")
    mp.setenv("SPECVIZ_CACHE", str(tmp / "cache"))
    mp.delenv("SPECVIZ_STOCK_LINEAR", raising=False)
    loaded = load_model(str(_tiny_folder(tmp / "m")), device="cpu", dtype="float32")
    lost = "" if (tmp / "cache").read_text() == "not a folder" else "the file was overwritten"
    return Told(f"loaded {loaded.name}", lost)


# -- 23: Qt's xcb plugin without its libraries ---------------------------------------------


def qt_without_xcb_cursor(tmp: Path, mp: pytest.MonkeyPatch) -> Told:
    from specviz.gui.windows import qt_check

    ldd = "\tlibxcb-cursor.so.0 => not found\n\tlibxcb.so.1 => /lib/libxcb.so.1 (0x1)\n"
    return Told(qt_check.check({}, "linux", lambda paths: ldd) or "")


CASES = [
    Case(15, "checkpoint that runs code when unpickled", planted_checkpoint,
         "it was not loaded, since unpickling it could run code",
         "tests/distill/test_checkpoint.py"),
    Case(15, "checkpoint cut short", cut_checkpoint, "is not a readable checkpoint",
         "tests/distill/test_checkpoint.py"),
    Case(16, "recording less its last 200 bytes", cut_recording,
         "line 19: the file ends in the middle of this event (cut short) (the 18 events before "
         "it are shown)", "tests/core/test_recording_damaged.py, tests/gui/test_replay_damaged.py"),
    Case(16, "recording with a broken line 10", bad_line_mid_file,
         "line 10: not a JSON event", "tests/core/test_recording_damaged.py"),
    Case(16, "race recording cut in half", cut_race, "(cut short)",
         "tests/gui/test_replay_damaged.py"),
    Case(17, "40 MiB line without a newline", one_huge_line,
         "line 2: longer than 32 MiB: not a recording (the event before it is shown)",
         "tests/core/test_recording_damaged.py"),
    Case(20, "empty folder as a model", empty_folder, "No model files in", "tests/test_hostile.py"),
    Case(20, "folder holding only a .gguf", folder_of_a_gguf,
         "give that file's path instead", "tests/test_hostile.py"),
    Case(20, "config.json but no weights", config_without_weights,
         "it has no weights (*.safetensors or pytorch_model.bin)", "tests/test_hostile.py"),
    Case(20, "weights but no tokenizer", weights_without_tokenizer,
         "it has no tokenizer files", "tests/test_hostile.py"),
    Case(20, "a web page saved as model.gguf", text_named_gguf, "is not a GGUF file",
         "tests/test_hostile.py"),
    Case(20, "an empty .gguf", empty_gguf, "is not a GGUF file", "tests/test_hostile.py"),
    Case(20, "specviz-cli on an empty folder", cli_empty_folder, "No model files in",
         "tests/test_hostile.py"),
    Case(19, "--dtype nonsense under --json", _cli_refusal("--json", "--dtype", "nonsense"),
         "argument --dtype: invalid choice: 'nonsense'", "tests/test_cli.py"),
    Case(19, "K out of range", _cli_refusal("--k", "99"), "K must be between 1 and 16",
         "tests/core/test_options.py"),
    Case(19, "a seed torch cannot take", _cli_refusal("--seed", "99999999999999999999999"),
         "seed must be between 0 and", "tests/core/test_options.py"),
    Case(19, "a whitespace-only prompt", _cli_refusal("--prompt", "  \t "),
         "The prompt is only whitespace", "tests/core/test_run.py"),
    Case(19, "a prompt with an undecodable byte", _cli_refusal("--prompt", "caf\udce9"),
         "The prompt is not valid UTF-8 text", "tests/core/test_run.py"),
    Case(19, "a prompt file that is not there", _cli_refusal("--prompt-file", "TMP/none.txt"),
         "Cannot read the prompt from", "tests/test_cli.py"),
    Case(19, "a prompt file in Latin-1", _cli_refusal("--prompt-file", "TMP/bad.txt"),
         "is not UTF-8 text (byte 3)", "tests/test_cli.py"),
    Case(21, "SPECVIZ_CACHE names a file", cache_is_a_file, "loaded m",
         "tests/core/test_cache_dir.py"),
    Case(23, "Qt's xcb plugin lacks libxcb-cursor", qt_without_xcb_cursor,
         "install with: sudo apt-get install -y libxcb-cursor0", "tests/gui/test_qt_check.py"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.item}-{c.name}" for c in CASES])
def test_hostile_input(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    told = case.run(tmp_path, monkeypatch)
    print(f"{case.item} {case.name}: {told.message}")
    assert case.expect in told.message, told.message
    assert "\n" not in told.message and 0 < len(told.message) < 400, told.message
    assert "Traceback" not in told.message
    assert told.lost == "", told.lost
    assert (ROOT / case.shown_by.split(",")[0]).is_file()


def test_the_model_checks_are_what_refuses(tmp_path: Path) -> None:
    """Broken variant for item 20: locate without the file check accepts an empty folder and
    a text .gguf (loading then ran ~17 s into a tokenizer message)."""
    from specviz.core import models
    from tests.mutation import mutant

    old = mutant(models.locate, ("        _check_model_files(path)\n        return ModelSource("
                                 "spec, str(path), path.name, \"folder\")",
                                 "        return ModelSource(spec, str(path), path.name, "
                                 "\"folder\")"),
                 ("        _check_model_files(path)\n        return ModelSource(spec, "
                  "str(path.parent), path.name, \"gguf\")",
                  "        return ModelSource(spec, str(path.parent), path.name, \"gguf\")"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "page.gguf").write_text("<html>404</html>")
    for spec in (tmp_path / "empty", tmp_path / "page.gguf"):
        assert old(str(spec)).how in ("folder", "gguf")
        with pytest.raises(models.ModelLoadError):
            models.locate(str(spec))
