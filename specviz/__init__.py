"""specviz: watch speculative decoding happen."""

__version__ = "0.1.0"
