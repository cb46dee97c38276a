"""Logging in the style of transformers: one library logger, silent unless configured."""

import logging
import os

from tokswap.constants import ENV_VERBOSITY

_LIBRARY_LOGGER = "tokswap"


def _configure_root() -> None:
    root = logging.getLogger(_LIBRARY_LOGGER)
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[tokswap] %(message)s"))
    root.addHandler(handler)
    root.setLevel(os.environ.get(ENV_VERBOSITY, "INFO").upper())
    root.propagate = False


def get_logger(name: str) -> logging.Logger:
    """Return a logger under the `tokswap` namespace (level from `TOKSWAP_VERBOSITY`, default INFO)."""
    _configure_root()
    if not name.startswith(_LIBRARY_LOGGER):
        name = f"{_LIBRARY_LOGGER}.{name}"
    return logging.getLogger(name)
