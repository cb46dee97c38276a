"""TRL's usage pings, kept away from private Hub endpoints.

TRL's trainers send a telemetry ping to `HF_ENDPOINT` when they are built. For a user whose `HF_ENDPOINT` is a
private Hub (an enterprise deployment, a mirror, a test server) that ping goes to their own server, and it is not
what they asked for. tokswap's trainers send it only when the endpoint is the public Hub; `HF_HUB_DISABLE_TELEMETRY=1`
and `HF_HUB_OFFLINE=1` still turn it off everywhere (huggingface_hub's own rule).
"""

from urllib.parse import urlparse

PUBLIC_HUB_HOSTS = ("huggingface.co", "hf.co")


def endpoint_is_public_hub() -> bool:
    """Whether huggingface_hub's endpoint (`HF_ENDPOINT`) is the public Hugging Face Hub."""
    from huggingface_hub import constants

    host = (urlparse(constants.ENDPOINT).hostname or "").lower()
    return any(host == public or host.endswith("." + public) for public in PUBLIC_HUB_HOSTS)


class PublicHubTelemetryMixin:
    """Put before a TRL trainer class: its telemetry ping is sent only to the public Hub."""

    def _send_telemetry(self):
        if endpoint_is_public_hub():
            super()._send_telemetry()
