"""Settings for tests of the engine's mechanics: the model drafter at a fixed K, sampled.

The options table's defaults (specviz.core.options) are the measured best for users (hybrid
drafting, the cost policy, greedy); a test of K, rollback or sampling wants every round to
draft exactly K with the model at T = 1 unless it says otherwise.
"""

from __future__ import annotations

from typing import Any

from specviz.core.events import Settings

PLAIN: dict[str, Any] = {"drafter": "model", "k_policy": "fixed", "lookup_k": 10,
                         "temperature": 1.0}


def plain(**changes: Any) -> Settings:
    """Settings with PLAIN's drafting and sampling, then ``changes``."""
    return Settings(**{**PLAIN, **changes})
