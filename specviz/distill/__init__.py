"""Distillation: train a small draft (q) for a target (p). A wing of its own, beside core.

``specviz distill ...`` and ``specviz-distill ...`` both run :func:`specviz.distill.train.main`.
core never imports this package (an import-linter contract in pyproject.toml).
"""
