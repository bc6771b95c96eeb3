"""Replays: a recording read beside the worker and played through the same views, and its bar."""
