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


# A tree round as the lookup tree drafts it: q one-hot on each node (q(x) = 1), so each
# sibling is kept with p(x) / (1 − Σ p of the siblings rejected before it).
ROOT_P = [(" the", 0.40), (" a", 0.25), (" cat", 0.15), (" dog", 0.10), (" sun", 0.05)]
THE_P = [(" sun", 0.50), (" mat", 0.20), (" big", 0.10), (" red", 0.08), (" on", 0.05)]


def tree_draft(i: int, text: str, parent: int, status: str, context_p: list[tuple[str, float]],
               r: float | None, against: float = 0.0) -> DraftPosition:
    """A lookup-tree node: q one-hot; p and p_top from its parent's context; ``against``: the
    mass the siblings rejected before it took away (its ratio is p / (1 − against))."""
    p = dict(context_p).get(text, 0.02)
    return DraftPosition(
        index=i, token_id=ID[text], text=text, q=1.0, p=p, ratio=min(1.0, p / (1.0 - against)),
        r=r, status=status,  # type: ignore[arg-type]
        q_top=top([(text, 1.0)]), p_top=top(context_p), drafter="lookup", parent=parent)


def tree_round_resampled(index: int = 0) -> Round:
    """Seven nodes: at the root “ cat” is rejected and “ the” kept against p′; after “ the”
    both children are rejected and “ mat” is drawn from p″ (p without them, renormalised)."""
    drafted = [
        tree_draft(0, " cat", -1, "rejected", ROOT_P, 0.6),
        tree_draft(1, " the", -1, "accepted", ROOT_P, 0.3, against=0.15),
        tree_draft(2, " dog", -1, "discarded", ROOT_P, None),
        tree_draft(3, " red", 0, "discarded", ROOT_P, None),
        tree_draft(4, " big", 1, "rejected", THE_P, 0.7),
        tree_draft(5, " sun", 1, "rejected", THE_P, 0.9, against=0.10),
        tree_draft(6, " mat", 5, "discarded", THE_P, None),
    ]
    ext = ExtraToken(kind="resampled", token_id=ID[" mat"], text=" mat", prob=0.5, p=0.2,
                     dist_top=top([(" mat", 0.5), (" red", 0.2), (" on", 0.125)]))
    return make_round(index, drafted, 1, ext, [" the", " mat"], None, 2 * index + 2, index + 1,
                      0, k=7)


def tree_round_bonus(index: int = 1) -> Round:
    """A path to a leaf: “ on” → “ a” → “ red” kept, “ the” beside “ a” discarded, a bonus."""
    on_p = [(" on", 0.6), (" the", 0.2)]
    a_p = [(" a", 0.7), (" the", 0.2)]
    red_p = [(" red", 0.5), (" big", 0.3)]
    drafted = [
        tree_draft(0, " on", -1, "accepted", on_p, 0.1),
        tree_draft(1, " a", 0, "accepted", a_p, 0.2),
        tree_draft(2, " the", 0, "discarded", a_p, None),
        tree_draft(3, " red", 1, "accepted", red_p, 0.4),
    ]
    ext = ExtraToken(kind="bonus", token_id=ID[" sun"], text=" sun", prob=0.3, p=0.3,
                     dist_top=top([(" sun", 0.3), (" mat", 0.2)]))
    return make_round(index, drafted, 3, ext, [" on", " a", " red", " sun"], None, 6, 2, 0, k=4)


def tree_events() -> list:
    """RunStarted (lookup-tree), the two tree rounds, a chain round, RunFinished."""
    started = RunStarted(
        mode="speculative", prompt=PROMPT, prompt_ids=(0, 1),
        settings=plain(k=8, temperature=1.0, max_new_tokens=64, seed=7, top_n=10,
                       drafter="lookup-tree", lookup_k=8),
        pair=PairInfo(draft=None, target="tiny-target", device="cpu", dtype="float64",
                      vocab_size=len(VOCAB)))
    chain = make_round(2, [tree_draft(0, " the", -1, "accepted", ROOT_P, 0.1),
                           tree_draft(1, " cat", 0, "rejected", ROOT_P, 0.9)],
                       1, extra("resampled", " dog", 0.6, 0.3), [" the", " dog"], None, 8, 3, 0,
                       k=2)
    rounds = [tree_round_resampled(0), tree_round_bonus(1), chain]
    finished = RunFinished(
        generated_ids=tuple(i for r in rounds for i in r.appended_ids),
        text="".join(r.appended_text for r in rounds), stop_reason="max_new_tokens",
        summary=Summary(tokens=8, rounds=3, drafted=13, accepted=5, acceptance_rate=5 / 13,
                        mean_tokens_per_round=8 / 3, acceptance_by_position=(0.5, 0.5),
                        target_calls=3, draft_calls=0, draft_time_s=0.0, verify_time_s=0.15,
                        wall_time_s=0.3, tokens_per_s=26.0))
    return [started, *rounds, finished]
