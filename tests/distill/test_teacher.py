"""`specviz distill teacher` on a tiny random target: prompts, shards, kill and resume."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from specviz.distill import teacher
from specviz.distill import train as distill
from specviz.distill.prompts import EvalFilter, prompt_key
from tests.tiny import WORDS, tiny_llama, word_tokenizer

CHAT = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}<s>assistant: {% endif %}")


def _tiny() -> tuple[Any, Any]:
    # Whole words, so a random target writes readable (if odd) prompts.
    tok = word_tokenizer(WORDS + ["how", "why", "what", "is", "fly", "owl", "tree", "blue",
                                  "green", "runs", "jumps", "in", "of", "and", "my", "code"])
    tok.chat_template = CHAT
    model = tiny_llama(len(tok), seed=5, hidden=32, layers=1, sharpness=2.0,
                       dtype=torch.float32)
    return model, tok


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-teacher-target")
    model, tok = _tiny()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


MIX = {"self": 0.4, "code": 0.1, "zh": 0.1, "text": 0.2, "general": 0.1, "templates": 0.1}
KW: dict[str, Any] = {"max_prompt_tokens": 10, "keep_unfinished": True,
                      "general": ["Tell me about owls.", "How do kites fly?"],
                      "templates": [("What is a prime number?", True), ("Once upon a", False)]}


def test_generated_prompts_are_varied_and_never_an_evaluation_prompt() -> None:
    model, tok = _tiny()
    first = teacher.generate_prompts(model, tok, 24, seed=3, mix=MIX,
                                     evaluation=EvalFilter([]), batch=12, **KW)
    assert len(first) == 24
    sources = {p.source for p in first}
    assert {"self", "text"} <= sources and sources & {"general", "templates"}
    assert any(not p.chat for p in first) and any(p.chat for p in first)
    sampled = [p for p in first if p.source in teacher.SAMPLED]
    keys = [prompt_key(p.text) for p in sampled]
    assert len(sampled) >= 12 and len(set(keys)) == len(keys)  # distinct

    # The same seed with some of those prompts as the evaluation set (in another case, and
    # one only as part of a longer line): none of them comes out, and the count is kept.
    banned = [sampled[0].text.upper(), sampled[1].text, sampled[2].text]
    evaluation = EvalFilter(banned, min_contained=1)
    second = teacher.generate_prompts(model, tok, 24, seed=3, mix=MIX, evaluation=evaluation,
                                      batch=12, **KW)
    assert len(second) == 24
    assert all(evaluation.allows(p.text) for p in second)
    assert not {prompt_key(t) for t in banned} & {prompt_key(p.text) for p in second}
    # Listed prompts go through the same filter.
    maker = teacher.PromptMaker(model, tok, MIX, EvalFilter(["how do KITES fly"]), **{
        k: v for k, v in KW.items() if k != "max_prompt_tokens"})
    assert [p.text for p in maker.listed["general"]] == ["Tell me about owls."]


def _argv(target: Path, out: Path) -> list[str]:
    return ["--target", str(target), "--out", str(out), "--shards", "4", "--gen-batch", "6",
            "--max-new-tokens", "10", "--max-prompt-tokens", "10", "--keep-unfinished",
            "--top-k", "4", "--teacher-precision", "fp32", "--seed", "11",
            "--mix", "self=0.5,text=0.25,templates=0.25"]


def _shard(path: Path) -> list[dict[str, torch.Tensor]]:
    return torch.load(path, weights_only=True)


def test_killed_teacher_resumes_without_duplicate_or_lost_rows(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert teacher.main(_argv(tiny_target, straight)) == 0
    assert teacher.done_shards(straight) == 4

    real = teacher.answer
    calls = {"n": 0}

    def killed_in_shard_2(*args: Any, **kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:  # shards 0 and 1 are written; SIGTERM while answering shard 2
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kw)

    monkeypatch.setattr(teacher, "answer", killed_in_shard_2)
    assert teacher.main(_argv(tiny_target, resumed)) == 130
    assert teacher.done_shards(resumed) == 2
    assert not teacher.shard_path(resumed, 2).exists()
    before = {i: (teacher.shard_path(resumed, i).stat().st_mtime_ns,
                  hashlib.sha256(teacher.shard_path(resumed, i).read_bytes()).hexdigest())
              for i in (0, 1)}
    monkeypatch.setattr(teacher, "answer", real)
    assert teacher.main(_argv(tiny_target, resumed)) == 0

    # Shards 0 and 1 were not written again, and every shard is what the straight run wrote.
    for i in (0, 1):
        path = teacher.shard_path(resumed, i)
        assert (path.stat().st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest()) == before[i]
    assert teacher.done_shards(resumed) == 4 and not teacher.shard_path(resumed, 4).exists()
    for i in range(4):
        a, b = _shard(teacher.shard_path(straight, i)), _shard(teacher.shard_path(resumed, i))
        assert len(a) == len(b) == 6
        for x, y in zip(a, b, strict=True):
            for key in ("ids", "top_ids", "top_lp"):
                assert torch.equal(x[key], y[key])
        ma, mb = (json.loads(teacher.manifest_path(f, i).read_text()) for f in (straight, resumed))
        assert ma["prompts"] == mb["prompts"] and ma["rows"] == mb["rows"]
    rows = [json.loads(teacher.manifest_path(resumed, i).read_text())["rows"] for i in range(4)]
    seqs = teacher.load_teacher_dir(resumed)
    assert len(seqs) == 24 and sum(int(s.top_ids.shape[0]) for s in seqs) == sum(rows)
    # Generated prompts are never repeated across shards.
    generated = [prompt_key(p["text"]) for p in teacher.iter_prompts(resumed)
                 if p["source"] in teacher.SAMPLED]
    assert len(generated) == len(set(generated)) >= 8

    m = json.loads(teacher.manifest_path(resumed, 3).read_text())
    for key in ("rows", "prompt_mix", "hardware", "teacher_precision", "command", "target"):
        assert key in m
    assert m["teacher_precision"] == "fp32" and m["command"].startswith("specviz distill teacher")
    info = teacher.summary(resumed)
    assert info["rows"] == sum(rows) and sum(info["prompt_mix"].values()) == 24
    assert teacher.main(["--out", str(resumed), "--summary"]) == 0
    assert distill.main(["teacher", "--out", str(resumed), "--summary"]) == 0  # subcommand

    # A resumed run must keep the settings its shards were made with.
    other = _argv(tiny_target, resumed)
    other[other.index("--seed") + 1] = "12"
    assert teacher.main(other) == 2


def test_training_reads_every_shard_of_a_teacher_folder(tiny_target: Path,
                                                        tmp_path: Path) -> None:
    root = tmp_path / "teacher"
    argv = _argv(tiny_target, root / "run-a")
    argv[argv.index("--shards") + 1] = "2"
    assert teacher.main(argv) == 0
    argv = _argv(tiny_target, root / "run-b")
    argv[argv.index("--shards") + 1] = "1"
    argv[argv.index("--seed") + 1] = "12"
    assert teacher.main(argv) == 0
    (root / "run-b" / "shard_00005.pt").write_bytes(b"")  # no manifest: never read
    assert len(teacher.load_teacher_dir(root)) == 18

    out, work = tmp_path / "draft", tmp_path / "work"
    assert distill.main([
        "--target", str(tiny_target), "--out", str(out), "--work-dir", str(work),
        "--teacher-dir", str(root), "--teacher-tokens", "0", "--heldout-tokens", "60",
        "--gen-batch", "8", "--max-new-tokens", "16", "--vocab", "24", "--hidden", "32",
        "--layers", "1", "--heads", "2", "--kv-heads", "1", "--intermediate", "64",
        "--steps", "2", "--batch-size", "4", "--seq-len", "64", "--top-k", "4", "--quiet"]) == 0
    card = (out / "README.md").read_text()
    rows = teacher.summary(root)["rows"]
    assert f"3 shards, {rows} rows" in card and not (work / "train").exists()


def test_a_repetitive_target_still_gives_distinct_prompts(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # A very peaked target writes nearly the same user turn after a given opener; prompts
    # must stay distinct across shards (calls), topped up from the lists when it runs dry.
    tok = _tiny()[1]
    model = tiny_llama(len(tok), seed=5, hidden=32, layers=1, sharpness=200.0,
                       dtype=torch.float32)
    monkeypatch.setattr(teacher.PromptMaker, "_openers", lambda self, source: ("What", "Why"))
    out = teacher.generate_prompts(model, tok, 40, seed=1, mix={"self": 0.8, "general": 0.2},
                                   evaluation=EvalFilter([]), batch=5, **KW)
    sampled = [prompt_key(p.text) for p in out if p.source == "self"]
    assert len(sampled) >= 3 and len(sampled) == len(set(sampled))


def test_chinese_prompts_must_be_mostly_chinese() -> None:
    assert teacher.cjk_share("用Python写一个计算列表平均值的函数。") > 0.6
    assert teacher.cjk_share("请解释x忍定vahamla:אסם الكلاف עواص.") < 0.6
    with pytest.raises(ValueError):
        teacher.parse_mix("self=1,poems=2")
    assert teacher.parse_mix("self=3,text=1") == {"self": 0.75, "text": 0.25}
