"""Test helpers for tokswap and its users: a loopback Hugging Face Hub.

Nothing here imports `huggingface_hub`, so it can be imported before the Hub client settings are
put in the environment (see `hub_client_env`). Names are loaded lazily, which keeps
`python -m tokswap.testing.hub_server` free of runpy's double-import warning.
"""

import importlib

_EXPORTS = {
    "LoopbackHub": "hub_server",
    "hub_client_env": "hub_server",
    "HubError": "hub_store",
    "HubStore": "hub_store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
