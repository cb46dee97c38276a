"""Test helpers for tokswap and its users: a loopback Hugging Face Hub.

Nothing here imports `huggingface_hub`, so it can be imported before the Hub client settings are
put in the environment (see `hub_client_env`).
"""

from .hub_server import LoopbackHub, hub_client_env
from .hub_store import HubError, HubStore

__all__ = ["HubError", "HubStore", "LoopbackHub", "hub_client_env"]
