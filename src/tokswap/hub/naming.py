"""Where alignments live on the Hub: the namespace, the index repo's name and each pair's repo id (no Hub calls)."""

import os
import re
from typing import Any, Optional

from tokswap.constants import ENV_ALIGNMENT_NAMESPACE, INDEX_REPO_NAME

ALIGNMENT_NAMESPACE_ENV = ENV_ALIGNMENT_NAMESPACE
DEFAULT_ALIGNMENT_NAMESPACE = "tokswap-alignments"


def alignment_namespace() -> str:
    """The Hub namespace holding prebuilt alignments (`$TOKSWAP_ALIGNMENT_NAMESPACE`, default `tokswap-alignments`)."""
    return os.environ.get(ALIGNMENT_NAMESPACE_ENV) or DEFAULT_ALIGNMENT_NAMESPACE


def alignment_index_repo_id(namespace: Optional[str] = None) -> str:
    """`<namespace>/index`, the repo whose `index.json` maps tokenizer pairs to alignment repos."""
    return f"{namespace or alignment_namespace()}/{INDEX_REPO_NAME}"


def _name_of(tokenizer_or_name: Any) -> str:
    if isinstance(tokenizer_or_name, str):
        return tokenizer_or_name
    if isinstance(tokenizer_or_name, dict):
        return str(tokenizer_or_name.get("name_or_path", ""))
    return str(getattr(tokenizer_or_name, "name_or_path", "") or "")


def tokenizer_slug(tokenizer_or_name: Any, max_length: int = 44) -> str:
    """A Hub-safe short name for a tokenizer: its id without the organization, lower-cased.

    Accepts a tokenizer, a fingerprint dict (`tokenizer_fingerprint`) or a name / local path.
    """
    name = _name_of(tokenizer_or_name).strip().rstrip("/\\")
    name = re.split(r"[/\\]", name)[-1] if name else ""
    slug = re.sub(r"[^a-z0-9._]+", "-", name.lower())
    slug = re.sub(r"-{2,}", "-", slug)
    slug = re.sub(r"\.{2,}", ".", slug)
    slug = slug.replace("_to_", "-to-")  # keep the pair separator unambiguous
    slug = slug[:max_length].strip("-._")
    return slug or "tokenizer"


def alignment_repo_id(source: Any, target: Any, namespace: Optional[str] = None) -> str:
    """The conventional repo id of the alignment `source -> target`: `<namespace>/<src>_to_<tgt>`.

    Args:
        source, target: tokenizers, fingerprint dicts or names (`"Qwen/Qwen2.5-0.5B"`).
        namespace: defaults to `alignment_namespace()`.
    """
    return f"{namespace or alignment_namespace()}/{tokenizer_slug(source)}_to_{tokenizer_slug(target)}"


def pair_key(source_vocab_hash: str, target_vocab_hash: str) -> str:
    """The key of a tokenizer pair in `index.json`."""
    return f"{source_vocab_hash}:{target_vocab_hash}"


def _qualify(repo_id: str, namespace: Optional[str] = None) -> str:
    """A bare repo name (`smollm2_to_qwen2.5`) is looked for in the alignment namespace."""
    return repo_id if "/" in repo_id else f"{namespace or alignment_namespace()}/{repo_id}"
