"""Shared fixtures: tiny random-weight pairs built in-process."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never download

import pytest

from specviz.core.models import ModelPair
from tests.tiny import tiny_pair as _tiny_pair


@pytest.fixture
def tiny_pair() -> ModelPair:
    """Two different tiny random Llamas (float64) sharing a word-level tokenizer."""
    return _tiny_pair(sharpness=8.0)
