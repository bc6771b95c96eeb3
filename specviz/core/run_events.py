"""The events of one run, built from what the loop decided (the loop stays the algorithm).

p = target, q = draft. Each distribution an event carries is cut to its top-N (plus the token
it is about, where that lies outside), with each id's text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .events import (
    FORMAT_VERSION,
    DraftPosition,
    ExtraKind,
    ExtraToken,
    PairInfo,
    Round,
    RunFinished,
    RunStarted,
    Settings,
    StopReason,
    Summary,
    TopN,
)
from .text import TokenTexts
from .verify import Verdict


class EventBuilder:
    """RunStarted, Round and RunFinished of one run."""

    def __init__(self, pair: Any, settings: Settings, prompt_ids: Sequence[int]) -> None:
        self.pair = pair
        self.settings = settings
        self.prompt_ids = tuple(prompt_ids)
        self.texts = TokenTexts(pair.tokenizer)

    def top(self, probs: torch.Tensor, extra_id: int | None = None) -> TopN:
        """Top-N of a 1-D distribution, plus ``extra_id`` if it lies outside the top-N."""
        return self.tops(probs[None], [extra_id])[0]

    def tops(self, rows: torch.Tensor, extra_ids: Sequence[int | None]) -> list[TopN]:
        """:meth:`top` of each of the first ``len(extra_ids)`` rows, in one ``topk`` call (a
        call per row cost ~2% of a run's wall time once the forward passes got faster)."""
        rows = rows[:len(extra_ids)]
        n = min(self.settings.top_n, rows.shape[-1])
        values, ids = torch.topk(rows, n, dim=-1)
        out = []
        for r, (id_list, prob_list) in enumerate(zip(ids.tolist(), values.tolist(), strict=True)):
            extra_id = extra_ids[r]
            if extra_id is not None and extra_id not in id_list:
                id_list.append(extra_id)
                prob_list.append(float(rows[r, extra_id]))
            out.append(TopN(tuple(id_list), tuple(prob_list),
                            tuple(self.texts(i) for i in id_list)))
        return out

    def started(self, mode: str, draft_name: str | None, draws_scaled: bool) -> RunStarted:
        """``draws_scaled``: the drafter draws from the draft model (at its temperature scale)."""
        pair = self.pair
        info = PairInfo(draft=draft_name, target=pair.target_name, device=str(pair.device),
                        dtype=str(pair.dtype).removeprefix("torch."), vocab_size=pair.vocab_size,
                        draft_temperature_scale=(pair.draft_temperature_scale
                                                 if mode == "speculative" and draws_scaled
                                                 else 1.0))
        return RunStarted(mode=mode,  # type: ignore[arg-type]
                          prompt=pair.tokenizer.decode(list(self.prompt_ids)),
                          prompt_ids=self.prompt_ids, pair=info, settings=self.settings,
                          format=FORMAT_VERSION)

    def round(self, *, index: int, drafts: list[int], source: str, q_rows: torch.Tensor,
              p_rows: torch.Tensor, verdict: Verdict, kept: list[int], pieces: list[str],
              extra_kept: bool, draft_time_s: float, verify_time_s: float, n_generated: int,
              target_calls: int, draft_calls: int, elapsed_s: float, final: bool,
              reason: str, exact: bool, parents: Sequence[int] | None = None,
              extra_p: torch.Tensor | None = None) -> Round:
        """The Round event of one verified round (``extra_kept``: the extra token survived
        EOS / budget trimming). A tree round gives each node's parent, p_rows per node (p at
        its parent context) and ``extra_p``, p where its extra token comes."""
        k = len(drafts)
        n_acc = verdict.n_accepted
        q_tops = self.tops(q_rows, drafts) if drafts else []
        p_tops = self.tops(p_rows, drafts) if drafts else []
        rejected = [i for i, rest in enumerate(verdict.residuals) if rest is not None]
        residual_tops: dict[int, TopN] = dict(zip(rejected, self.tops(
            torch.stack([verdict.residuals[i] for i in rejected]),  # type: ignore[misc]
            [None] * len(rejected)), strict=True)) if rejected else {}
        drafted = tuple(
            DraftPosition(
                index=i, token_id=x, text=self.texts(x), q=float(q_rows[i, x]),
                p=float(p_rows[i, x]), ratio=verdict.ratios[i], r=verdict.rs[i],
                status=verdict.statuses[i], q_top=q_tops[i],
                p_top=p_tops[i], drafter=source,
                parent=parents[i] if parents is not None else None,
                residual_top=residual_tops.get(i),
            )
            for i, x in enumerate(drafts)
        )
        extra_event = None
        if extra_kept:
            dist, extra_id = verdict.extra_dist, verdict.extra_id
            kind: ExtraKind = "target" if k == 0 else verdict.extra_kind  # K = 0: a plain step
            extra_event = ExtraToken(
                kind=kind,
                token_id=extra_id, text=self.texts(extra_id), prob=float(dist[extra_id]),
                p=float((p_rows[n_acc] if extra_p is None else extra_p)[extra_id]),
                dist_top=self.top(dist, extra_id),
            )
        return Round(
            index=index,
            k=k,
            drafted=drafted,
            n_accepted=n_acc,
            extra=extra_event,
            bonus_top=(self.top(p_rows[k] if extra_p is None else extra_p) if k else None),
            appended_ids=tuple(kept),
            appended_text="".join(pieces),
            appended_texts=tuple(pieces),
            draft_time_s=draft_time_s,
            verify_time_s=verify_time_s,
            n_generated=n_generated,
            target_calls=target_calls,
            draft_calls=draft_calls,
            elapsed_s=elapsed_s,
            final=final,
            policy_reason=reason,
            exact=exact,
        )

    @staticmethod
    def finished(generated: Sequence[int], text: str, stop_reason: StopReason | None,
                 summary: Summary) -> RunFinished:
        return RunFinished(generated_ids=tuple(generated), text=text,
                           stop_reason=stop_reason or "stopped", summary=summary)
