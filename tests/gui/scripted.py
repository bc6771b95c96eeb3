"""A hand-written event sequence with every fate of a token, for checking what views draw."""

from __future__ import annotations

from specviz.core.events import (
    DraftPosition,
    ExtraToken,
    PairInfo,
    Round,
    RunFinished,
    RunStarted,
    Summary,
    TopN,
)
from tests.plain import plain

VOCAB = [" the", " cat", " sat", " dog", " on", " a", "\n", "猫", " red", " big", " mat", " x",
         "</s>", " sun"]
ID = {t: i for i, t in enumerate(VOCAB)}
PROMPT = "Once upon"
SETTINGS = plain(k=3, temperature=1.0, max_new_tokens=64, seed=7, top_n=10)


def top(pairs: list[tuple[str, float]]) -> TopN:
    return TopN(tuple(ID[t] for t, _ in pairs), tuple(p for _, p in pairs),
                tuple(t for t, _ in pairs))


def draft(i: int, text: str, status: str, p: float, q: float, r: float | None) -> DraftPosition:
    """A draft whose top-N lists have the drafted token and two others."""
    others = [t for t in (" sun", " mat", " big") if t != text][:2]
    return DraftPosition(
        index=i, token_id=ID[text], text=text, q=q, p=p, ratio=min(1.0, p / q), r=r,
        status=status,  # type: ignore[arg-type]
        q_top=top(sorted([(text, q), (others[0], 0.2), (others[1], 0.1)], key=lambda x: -x[1])),
        p_top=top(sorted([(text, p), (others[0], 0.15), (others[1], 0.05)], key=lambda x: -x[1])),
    )


def extra(kind: str, text: str, prob: float, p: float) -> ExtraToken:
    return ExtraToken(kind=kind, token_id=ID[text], text=text, prob=prob, p=p,  # type: ignore[arg-type]
                      dist_top=top([(text, prob), (" sun", 0.1), (" mat", 0.05)]))


def make_round(index: int, drafted: list[DraftPosition], n_acc: int, ext: ExtraToken | None,
               appended: list[str], texts: list[str] | None, n_generated: int,
               target_calls: int, draft_calls: int, k: int = 3) -> Round:
    texts = appended if texts is None else texts
    return Round(
        index=index, k=k, drafted=tuple(drafted), n_accepted=n_acc, extra=ext,
        bonus_top=None, appended_ids=tuple(ID[t] for t in appended),
        appended_text="".join(texts), appended_texts=tuple(texts),
        draft_time_s=0.01 * k, verify_time_s=0.05, n_generated=n_generated,
        target_calls=target_calls, draft_calls=draft_calls, elapsed_s=0.1 * (index + 1),
    )


def speculative_events() -> list:
    """RunStarted, four rounds (resample, bonus, reject-first, EOS), RunFinished."""
    started = RunStarted(
        mode="speculative", prompt=PROMPT, prompt_ids=(0, 1), settings=SETTINGS,
        pair=PairInfo(draft="tiny-draft", target="tiny-target", device="cpu", dtype="float64",
                      vocab_size=len(VOCAB)),
    )
    r0 = make_round(
        0,
        [draft(0, " the", "accepted", 0.5, 0.4, 0.2), draft(1, " cat", "accepted", 0.3, 0.6, 0.4),
         draft(2, " sat", "rejected", 0.1, 0.5, 0.9)],
        2, extra("resampled", " dog", 0.6, 0.3), [" the", " cat", " dog"], None, 3, 1, 3)
    r1 = make_round(
        1,
        [draft(0, " on", "accepted", 0.7, 0.7, 0.5), draft(1, " a", "accepted", 0.8, 0.6, 0.99),
         draft(2, "\n", "accepted", 0.4, 0.5, 0.1)],
        3, extra("bonus", "猫", 0.35, 0.35), [" on", " a", "\n", "猫"], None, 7, 2, 6)
    r2 = make_round(
        2,
        [draft(0, " red", "rejected", 0.05, 0.5, 0.7),
         draft(1, " big", "discarded", 0.2, 0.3, None),
         draft(2, " sun", "discarded", 0.2, 0.3, None)],
        0, extra("resampled", " big", 0.4, 0.2), [" big"], None, 8, 3, 9)
    r3 = make_round(
        3,
        [draft(0, " mat", "accepted", 0.9, 0.8, 0.3), draft(1, " x", "rejected", 0.0, 0.4, 0.5)],
        1, extra("resampled", "</s>", 0.7, 0.5), [" mat", "</s>"], [" mat", ""], 10, 4, 11, k=2)
    finished = RunFinished(
        generated_ids=tuple(i for r in (r0, r1, r2, r3) for i in r.appended_ids),
        text="".join(r.appended_text for r in (r0, r1, r2, r3)), stop_reason="eos",
        summary=Summary(tokens=10, rounds=4, drafted=11, accepted=6, acceptance_rate=6 / 11,
                        mean_tokens_per_round=2.5, acceptance_by_position=(0.75, 2 / 3, 0.5),
                        target_calls=4, draft_calls=11, draft_time_s=0.33, verify_time_s=0.2,
                        wall_time_s=0.5, tokens_per_s=20.0, alpha=6 / 9),
    )
    return [started, r0, r1, r2, r3, finished]


# What the stream shows after the prompt, token by token: (text, kind).
EXPECTED_TOKENS = [
    (" the", "accepted"), (" cat", "accepted"), (" sat", "rejected"), (" dog", "resampled"),
    (" on", "accepted"), (" a", "accepted"), ("↵\n", "accepted"), ("猫", "bonus"),
    (" red", "rejected"), (" big", "resampled"),
    (" mat", "accepted"), (" x", "rejected"), ("⟨</s>⟩", "resampled"),
]


def baseline_events() -> list:
    """A target-alone run of three tokens."""
    started = RunStarted(
        mode="baseline", prompt=PROMPT, prompt_ids=(0, 1), settings=SETTINGS,
        pair=PairInfo(draft=None, target="tiny-target", device="cpu", dtype="float64",
                      vocab_size=len(VOCAB)),
    )
    rounds = [make_round(i, [], 0, extra("target", t, 0.5, 0.5), [t], None, i + 1, i + 1, 0, k=0)
              for i, t in enumerate([" the", " cat", " sat"])]
    finished = RunFinished(
        generated_ids=tuple(ID[t] for t in (" the", " cat", " sat")), text=" the cat sat",
        stop_reason="max_new_tokens",
        summary=Summary(tokens=3, rounds=3, drafted=0, accepted=0, acceptance_rate=0.0,
                        mean_tokens_per_round=1.0, acceptance_by_position=(), target_calls=3,
                        draft_calls=0, draft_time_s=0.0, verify_time_s=0.15, wall_time_s=0.3,
                        tokens_per_s=10.0),
    )
    return [started, *rounds, finished]
