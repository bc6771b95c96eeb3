"""Shared fixtures: tiny random-weight pairs built in-process."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never download

import pytest  # noqa: E402 - after the environment above
import torch  # noqa: E402

# Tiny models: extra threads only add overhead, and on a busy 2-core machine they
# oversubscribe badly (a tiny run goes from ~15 ms to over a second).
torch.set_num_threads(1)

from specviz.core.models import ModelPair  # noqa: E402
from tests.tiny import tiny_pair as _tiny_pair  # noqa: E402


@pytest.fixture
def tiny_pair() -> ModelPair:
    """Two different tiny random Llamas (float64) sharing a word-level tokenizer."""
    return _tiny_pair(sharpness=8.0)
