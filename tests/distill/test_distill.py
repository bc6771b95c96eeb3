"""`specviz distill` end to end on a tiny random target, and the shipped draft."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specviz.core.models import (
    BUNDLED_DRAFT_DIR,
    DEFAULT_PROMPT,
    VOCAB_MAP_FILE,
    load_model,
    load_pair,
)
from specviz.distill import train as distill
from specviz.distill.data import TeacherSeq
from specviz.distill.prompts import all_prompts, free_prompts, heldout_prompts, train_prompts
from tests.tiny import byte_tokenizer, tiny_llama


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random, peaked Llama target with a byte-level BPE tokenizer, saved as a folder."""
    folder = tmp_path_factory.mktemp("tiny-target")
    tok = byte_tokenizer(300)
    model = tiny_llama(len(tok), seed=3, hidden=48, layers=2, sharpness=6.0,
                       dtype=torch.float32)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _argv(target: Path, out: Path, work: Path, steps: int = 40) -> list[str]:
    return ["--target", str(target), "--out", str(out), "--work-dir", str(work),
            "--teacher-tokens", "1000", "--heldout-tokens", "300", "--gen-batch", "16",
            "--max-new-tokens", "32", "--vocab", "250", "--hidden", "32", "--layers", "1",
            "--heads", "2", "--kv-heads", "1", "--intermediate", "64", "--steps", str(steps),
            "--batch-size", "8", "--seq-len", "64", "--lr", "1e-2", "--eval-every", "20",
            "--ckpt-every", "10", "--seed", "7", "--quiet"]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_distil_end_to_end_beats_untrained(tiny_target: Path, tmp_path: Path) -> None:
    out, work = tmp_path / "draft", tmp_path / "work"
    assert distill.main(_argv(tiny_target, out, work)) == 0

    result = json.loads((work / "result.json").read_text())
    trained, untrained = result["heldout"], result["untrained"]
    assert trained["rows"] > 100
    # Held-out prompts, never trained on: the distilled draft agrees with p more often.
    assert trained["alpha_t1"] > untrained["alpha_t1"] + 0.05
    assert trained["greedy_agree"] > untrained["greedy_agree"]
    assert trained["kl"] < untrained["kl"]

    draft = AutoModelForCausalLM.from_pretrained(out)  # a standard transformers folder
    vocab = json.loads((out / VOCAB_MAP_FILE).read_text())
    assert draft.config.vocab_size == len(vocab["target_ids"]) == 250
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()
    assert "specviz distill --target" in (out / "README.md").read_text()

    pair = load_pair(str(out), str(tiny_target), device="cpu")  # tokenizer check passes
    assert pair.draft_vocab_map is not None
    assert pair.draft_vocab_map.tolist() == vocab["target_ids"]
    assert pair.vocab_size == 300


def test_interrupted_run_resumes_to_the_same_model(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    straight = tmp_path / "straight"
    assert distill.main(_argv(tiny_target, straight / "out", straight / "work", 24)) == 0

    resumed = tmp_path / "resumed"
    for part in ("train", "heldout"):  # same seed, same teacher data: reuse it (faster)
        shutil.copytree(straight / "work" / part, resumed / "work" / part)
    real_loss = distill.distill_loss
    calls = {"n": 0}

    def interrupting_loss(logits: torch.Tensor, batch: distill.Batch) -> distill.LossParts:
        # Training calls come after the untrained evaluation; stop in the middle of step 15.
        if torch.is_grad_enabled():
            calls["n"] += 1
            if calls["n"] == 15:
                raise KeyboardInterrupt
        return real_loss(logits, batch)

    monkeypatch.setattr(distill, "distill_loss", interrupting_loss)
    argv = _argv(tiny_target, resumed / "out", resumed / "work", 24)
    assert distill.main(argv) == 130
    assert distill.load_checkpoint(resumed / "work" / distill.CKPT)["step"] == 14
    monkeypatch.setattr(distill, "distill_loss", real_loss)
    assert distill.main(argv) == 0

    a, b = _weights(straight / "out"), _weights(resumed / "out")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)


def test_init_continues_from_an_existing_draft(tiny_target: Path, tmp_path: Path) -> None:
    first = tmp_path / "first"
    assert distill.main(_argv(tiny_target, first / "out", first / "work", 20)) == 0
    before = json.loads((first / "work" / "result.json").read_text())["heldout"]

    second = tmp_path / "second"
    argv = _argv(tiny_target, second / "out", second / "work", 20)
    # Another seed (other teacher samples) and a shape that --init must override.
    argv[argv.index("--seed") + 1] = "8"
    argv[argv.index("--hidden") + 1] = "64"
    argv += ["--init", str(first / "out")]
    assert distill.main(argv) == 0
    result = json.loads((second / "work" / "result.json").read_text())
    # The starting point is the first draft, not a fresh student: same held-out score.
    for key in ("alpha_t1", "greedy_agree", "kl"):
        assert result["untrained"][key] == pytest.approx(before[key], abs=2e-3)
    assert result["heldout"]["kl"] < before["kl"]  # and it kept learning
    assert (json.loads((second / "out" / VOCAB_MAP_FILE).read_text())
            == json.loads((first / "out" / VOCAB_MAP_FILE).read_text()))
    assert AutoModelForCausalLM.from_pretrained(second / "out").config.hidden_size == 32
    card = (second / "out" / "README.md").read_text()
    assert "Continued from the draft in" in card and "--seed 7" in card

    # A third run keeps the whole lineage: its card names both earlier commands, newest first;
    # it also widens the vocabulary (250 -> 260 ids), and the result pairs with the target.
    third = tmp_path / "third"
    argv = _argv(tiny_target, third / "out", third / "work", 2)
    argv += ["--init", str(second / "out"), "--widen-vocab", "260"]
    assert distill.main(argv) == 0
    wide_ids = json.loads((third / "out" / VOCAB_MAP_FILE).read_text())["target_ids"]
    assert len(wide_ids) == 260 and set(wide_ids) > set(
        json.loads((second / "out" / VOCAB_MAP_FILE).read_text())["target_ids"])
    assert load_pair(str(third / "out"), str(tiny_target), device="cpu").draft_vocab_map.tolist() \
        == wide_ids
    lineage = [line for line in (third / "out" / "README.md").read_text().splitlines()
               if line.startswith("- Continued from")]
    assert len(lineage) == 1
    made_by = lineage[0].split("itself made by")[1:]
    assert len(made_by) == 2
    assert "--seed 8" in made_by[0] and "--init" in made_by[0]
    assert "--seed 7" in made_by[1] and "--init" not in made_by[1]


def test_loss_is_zero_when_q_equals_p() -> None:
    logits = torch.randn(1, 3, 10)
    logp = torch.log_softmax(logits, -1)
    values, ids = logp.topk(10, dim=-1)
    batch = distill.Batch(inputs=torch.zeros(1, 3, dtype=torch.long), top_ids=ids,
                          top_lp=values, mask=torch.ones(1, 3, dtype=torch.bool))
    parts = distill.distill_loss(logits, batch)
    torch.testing.assert_close(parts.kl, torch.zeros(1, 3), atol=1e-5, rtol=0)
    torch.testing.assert_close(parts.alpha, torch.ones(1, 3), atol=1e-5, rtol=0)
    assert bool(parts.agree.all())
    other = distill.distill_loss(torch.randn(1, 3, 10), batch)
    assert float(other.kl.min()) > 0 and float(other.alpha.max()) < 1


def test_heldout_prompts_are_disjoint_from_training_prompts() -> None:
    held, train = set(heldout_prompts()), set(train_prompts())
    assert len(held) >= 50 and len(train) >= 500
    assert not held & train
    # The hand-written prompts match no template filling, held out or not.
    free = {text for text, _ in free_prompts()}
    assert len(free) == 12 and not free & {text for text, _ in all_prompts()}


def test_default_prompt_is_held_out_for_the_shipped_draft() -> None:
    # docs/distill.md says the app opens on an unseen filling of a training template.
    assert (DEFAULT_PROMPT, True) in heldout_prompts()
    assert DEFAULT_PROMPT not in {text for text, _ in train_prompts()}


def test_lookup_maps_missing_ids_to_oov() -> None:
    table = distill.vocab_lookup([0, 5, 7], full=10, oov=0)
    assert table.tolist() == [0, 0, 0, 0, 0, 1, 0, 2, 0, 0]


def test_shipped_draft_is_small_and_loads_offline() -> None:
    size = sum(f.stat().st_size for f in BUNDLED_DRAFT_DIR.iterdir() if f.is_file())
    assert size <= 30 * 1024 * 1024  # 12.6M fp16 parameters (16,384 ids) and the tokenizer
    draft = load_model("smollm2-135m-draft", device="cpu")
    assert next(draft.model.parameters()).dtype == torch.float32  # fp16 on disk, upcast
    assert draft.vocab_map is not None
    assert draft.model.config.vocab_size == draft.vocab_map.numel()
    assert len(draft.tokenizer) == 49152 and int(draft.vocab_map.max()) < 49152
    ids = torch.tensor([[1, 2, 3]])
    assert draft.model(input_ids=ids).logits.shape == (1, 3, draft.vocab_map.numel())


@pytest.mark.slow
def test_shipped_draft_pairs_with_the_bundled_target() -> None:
    pair = load_pair("smollm2-135m-draft", "smollm2-135m", device="cpu")
    target_tok = AutoTokenizer.from_pretrained(BUNDLED_DRAFT_DIR)
    assert target_tok.get_vocab() == pair.tokenizer.get_vocab()
    assert pair.draft_vocab_map is not None and pair.vocab_size == 49152


def test_greedy_rows_after_a_sampled_prefix(tiny_target: Path) -> None:
    """Row 0 is greedy from the start; row 1 samples 3 tokens first, then is greedy."""
    from specviz.distill.data import sample_batch

    model = AutoModelForCausalLM.from_pretrained(tiny_target, dtype=torch.float32).eval()
    prompt = [5, 17, 42]
    firsts = set()
    for seed in range(4):
        seqs = sample_batch(model, [prompt, prompt], [0.0, 0.0], 12, 4, set(), 0,
                            torch.Generator().manual_seed(seed), sampled_prefix=[0, 3])
        for seq, free in zip(seqs, (0, 3), strict=True):
            new = seq.ids[seq.start:]
            assert new.numel() == 12
            # Every token after the sampled prefix is the teacher's argmax at that step.
            assert torch.equal(new[free:], seq.top_ids[free:, 0].to(new.dtype))
        firsts.add(tuple(seqs[1].ids[seqs[1].start:seqs[1].start + 3].tolist()))
        greedy = seqs[0].ids.tolist()
        reference = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                                   attention_mask=torch.ones(1, 3, dtype=torch.long))
        assert greedy == reference[0].tolist()
    assert len(firsts) > 1  # the prefix is sampled, not greedy


def test_prompt_file_replaces_the_templates(tiny_target: Path, tmp_path: Path) -> None:
    from specviz.distill.data import load_shards

    lines = ["The cat sat on", "# a comment, skipped", "", "Numbers: one, two,"]
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    work = tmp_path / "work"
    argv = _argv(tiny_target, tmp_path / "out", work, 2)
    argv += ["--prompt-file", str(prompts), "--no-template-prompts", "--stage", "data"]
    assert distill.main(argv) == 0
    tok = AutoTokenizer.from_pretrained(tiny_target)
    wanted = {tuple(tok.encode(t, add_special_tokens=False)) for t in (lines[0], lines[3])}
    seqs = load_shards(work / "train")
    assert len(seqs) >= 16
    assert {tuple(s.ids[:s.start].tolist()) for s in seqs} == wanted  # both, and only these
    # The held-out set stays the built-in one, so evaluations remain comparable.
    assert all(tuple(s.ids[:s.start].tolist()) not in wanted
               for s in load_shards(work / "heldout"))
    with pytest.raises(SystemExit):
        distill.parse_args(["--target", "x", "--out", "y", "--no-template-prompts"])


def test_general_prompt_file_is_disjoint_from_evaluation_prompts() -> None:
    path = Path(__file__).resolve().parents[2] / "assets" / "prompts" / "general.txt"
    general = set(path.read_text(encoding="utf-8").splitlines())
    assert len(general) >= 100
    assert not general & {text for text, _ in free_prompts() + heldout_prompts()}


def test_bad_input_is_one_line_not_a_traceback(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    argv = _argv(tmp_path / "no-such-target", tmp_path / "out", tmp_path / "work")
    assert distill.main(argv) == 2
    err = capsys.readouterr().err
    assert "specviz distill: error:" in err and "no-such-target" in err
    assert "Traceback" not in err
    empty = tmp_path / "empty.txt"
    empty.write_text("# only a comment\n\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        distill.parse_args(["--target", "x", "--out", "y", "--prompt-file", str(empty),
                            "--no-template-prompts"])
    assert "hold no prompts" in capsys.readouterr().err


def _widened_agrees(old: object, old_ids: list[int], wide: object, new_ids: list[int]) -> None:
    """On text of ids both drafts have, the wide draft scores every old id as the old one did."""
    ids = torch.tensor([[old_ids.index(t) for t in (5, 39, 42, 99, 180)]])
    wide_in = torch.tensor([[new_ids.index(old_ids[int(i)]) for i in ids[0]]])
    with torch.no_grad():
        a = old(input_ids=ids).logits[0]  # type: ignore[operator]
        b = wide(input_ids=wide_in).logits[0]  # type: ignore[operator]
    at = torch.tensor([new_ids.index(t) for t in old_ids])
    torch.testing.assert_close(b[:, at], a, rtol=1e-5, atol=1e-5)


def test_widen_vocab_adds_the_heaviest_ids_and_keeps_the_old_rows() -> None:
    target = tiny_llama(300, seed=3, hidden=48, layers=2, dtype=torch.float32)
    old_ids = [i for i in range(300) if i % 3 != 1][:190]  # a reduced vocabulary, with gaps
    shape = distill.StudentShape(32, 1, 2, 1, 64, len(old_ids))
    eos, oov = old_ids.index(2), old_ids.index(0)
    student = distill.build_student(target, shape, old_ids, oov, seed=1)
    student.config.eos_token_id = eos
    # Teacher rows putting most mass on ids 1, 4 and 298, none of which the draft has.
    heavy = [298, 4, 1]
    seqs = [TeacherSeq(ids=torch.tensor([5, 40, 41, 99], dtype=torch.int32), start=1,
                       top_ids=torch.tensor([heavy + [7]] * 3, dtype=torch.int32),
                       top_lp=torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3)).half())]

    wide, new_ids, new_oov = distill.widen_vocab(student, target, old_ids, oov, seqs, 193)
    assert new_ids == sorted(old_ids + heavy)
    assert wide.config.vocab_size == 193
    assert new_ids[new_oov] == 0 and new_ids[wide.config.eos_token_id] == 2
    assert wide.get_output_embeddings().weight.data_ptr() == \
        wide.get_input_embeddings().weight.data_ptr()  # still tied
    _widened_agrees(student, old_ids, wide, new_ids)
    # New rows are the target's rows mapped into the draft's space, not zeros or noise.
    rows_new = wide.get_input_embeddings().weight.detach()
    rows_old = student.get_input_embeddings().weight.detach()
    assert float(rows_new[new_ids.index(298)].norm()) > 0.1 * float(rows_old.norm(dim=1).mean())

    # Broken variant: new rows appended after the old ones while the id list is sorted
    # (rows and ids out of step), which the logit check rejects.
    import copy
    broken = copy.deepcopy(wide)
    with torch.no_grad():
        rows = wide.get_input_embeddings().weight
        order = [new_ids.index(t) for t in old_ids] + [new_ids.index(t) for t in heavy]
        broken.get_input_embeddings().weight.copy_(rows[torch.tensor(order)])
        broken.tie_weights()
    with pytest.raises(AssertionError):
        _widened_agrees(student, old_ids, broken, new_ids)


def test_time_budget_ends_training_cooled_down() -> None:
    """With --minutes spent, the learning rate is at its floor whatever the step count."""
    lr, steps = 1e-3, 1000
    assert distill.lr_at(500, steps, lr) > 0.4 * lr  # half-way by steps: still high
    assert distill.lr_at(500, steps, lr, done=1.0) == pytest.approx(0.1 * lr)
    assert distill.lr_at(500, steps, lr, done=0.5) == pytest.approx(distill.lr_at(550, steps, lr))
    assert distill.lr_at(0, steps, lr, done=0.9) == distill.lr_at(0, steps, lr)  # warm-up first

    def ignores_time(step: int, steps: int, lr: float, done: float = 0.0) -> float:
        # Broken variant: the schedule follows steps only, so a run cut by its budget ends hot.
        warm = max(1, min(100, steps // 10))
        t = (step - warm) / max(1, steps - warm)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))

    assert ignores_time(500, steps, lr, done=1.0) != pytest.approx(0.1 * lr)


def test_minutes_budget_stops_and_still_writes_the_draft(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clock that advances one second each time training reads it: a 0.2 min (12 s) budget
    # ends the run after a handful of its 1,000 steps, with a checkpoint, a draft and a card.
    ticks = iter(range(10**6))
    monkeypatch.setattr(distill, "_clock", lambda: float(next(ticks)))
    seen: list[float] = []
    real_lr_at = distill.lr_at

    def spy(step: int, steps: int, lr: float, done: float = 0.0) -> float:
        seen.append(done)
        return real_lr_at(step, steps, lr, done)

    monkeypatch.setattr(distill, "lr_at", spy)
    out, work = tmp_path / "out", tmp_path / "work"
    argv = _argv(tiny_target, out, work, steps=1000) + ["--minutes", "0.2"]
    assert distill.main(argv) == 0
    step = torch.load(work / distill.CKPT, weights_only=False)["step"]
    assert 1 <= step < 20
    assert len(seen) == step and seen == sorted(seen) and seen[-1] > 0.5
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"- Training: {step} (of --steps 1000; --minutes 0.2 ended it) steps" in card
    assert (out / "model.safetensors").is_file()
    # Run again: the budget is already spent, so nothing more trains (seconds are saved).
    assert distill.main(argv) == 0
    assert torch.load(work / distill.CKPT, weights_only=False)["step"] == step
