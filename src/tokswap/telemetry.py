"""TRL's usage pings from tokswap's trainers: off unless the user turns them on.

TRL's trainers send a telemetry ping to `HF_ENDPOINT` when they are built. tokswap builds those trainers for the
user (`swapper.train()`, `tokswap train`), so the user never chose to send it, and for one whose `HF_ENDPOINT` is a
private Hub (an enterprise deployment, a mirror, a test server) it goes to their own server. tokswap's trainers
send it only when `TOKSWAP_TELEMETRY=1` and the endpoint is the public Hub; `HF_HUB_DISABLE_TELEMETRY=1` and
`HF_HUB_OFFLINE=1` still turn it off (huggingface_hub's own rule).
"""

import os
from urllib.parse import urlparse

from tokswap.constants import ENV_TELEMETRY

TELEMETRY_ENV = ENV_TELEMETRY
PUBLIC_HUB_HOSTS = ("huggingface.co", "hf.co")


def endpoint_is_public_hub() -> bool:
    """Whether huggingface_hub's endpoint (`HF_ENDPOINT`) is the public Hugging Face Hub."""
    from huggingface_hub import constants

    host = (urlparse(constants.ENDPOINT).hostname or "").lower()
    return any(host == public or host.endswith("." + public) for public in PUBLIC_HUB_HOSTS)


def telemetry_enabled() -> bool:
    """The user turned TRL's ping on (`TOKSWAP_TELEMETRY=1`) and it would go to the public Hub."""
    return os.environ.get(TELEMETRY_ENV, "").strip().lower() in ("1", "true", "yes") and endpoint_is_public_hub()


class PublicHubTelemetryMixin:
    """Put before a TRL trainer class: its telemetry ping is sent only when `telemetry_enabled()`."""

    def _send_telemetry(self):
        if telemetry_enabled():
            super()._send_telemetry()
