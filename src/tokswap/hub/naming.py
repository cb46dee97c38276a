"""Where alignments live on the Hub: the namespace and the index repo's name (no Hub calls, no tokswap imports).

Kept apart from `tokswap.hub` so that the model cards can name the index repo without importing the Hub client
code (which imports `tokswap.alignment`, which imports this module's users): no import circle.
"""

import os
from typing import Optional

ALIGNMENT_NAMESPACE_ENV = "TOKSWAP_ALIGNMENT_NAMESPACE"
DEFAULT_ALIGNMENT_NAMESPACE = "tokswap-alignments"
from tokswap.constants import INDEX_REPO_NAME  # noqa: E402,F401 (re-exported)


def alignment_namespace() -> str:
    """The Hub namespace holding prebuilt alignments (`$TOKSWAP_ALIGNMENT_NAMESPACE`, default `tokswap-alignments`)."""
    return os.environ.get(ALIGNMENT_NAMESPACE_ENV) or DEFAULT_ALIGNMENT_NAMESPACE


def alignment_index_repo_id(namespace: Optional[str] = None) -> str:
    """`<namespace>/index`, the repo whose `index.json` maps tokenizer pairs to alignment repos."""
    return f"{namespace or alignment_namespace()}/{INDEX_REPO_NAME}"
