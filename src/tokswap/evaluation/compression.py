"""Compression: bytes per token of a tokenizer, and the change in token count when one tokenizer replaces
another (the paper's Table 1)."""

from __future__ import annotations

from typing import Mapping, Sequence, Union

from tokswap.evaluation.common import _encode_many


def compression(tokenizer, texts: Union[str, Sequence[str]]) -> dict:
    """How densely `tokenizer` packs `texts` (no special tokens counted).

    Returns:
        dict with `num_texts`, `num_bytes` (UTF-8), `num_chars`, `num_tokens`, `bytes_per_token`,
        `chars_per_token` and `tokens_per_byte`.
    """
    if isinstance(texts, str):
        texts = [texts]
    texts = [t for t in texts if t]
    num_tokens = sum(len(ids) for ids in _encode_many(tokenizer, texts)) if texts else 0
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    num_chars = sum(len(t) for t in texts)
    return {
        "num_texts": len(texts),
        "num_bytes": num_bytes,
        "num_chars": num_chars,
        "num_tokens": num_tokens,
        "bytes_per_token": num_bytes / num_tokens if num_tokens else float("nan"),
        "chars_per_token": num_chars / num_tokens if num_tokens else float("nan"),
        "tokens_per_byte": num_tokens / num_bytes if num_bytes else float("nan"),
    }


def compare_compression(source_tokenizer, target_tokenizer, texts_by_language: Mapping[str, Sequence[str]]) -> dict:
    """Token counts of two tokenizers per language, and the change when `target` replaces `source`.

    Args:
        source_tokenizer: the tokenizer the model has now.
        target_tokenizer: the candidate tokenizer.
        texts_by_language: `{language or domain: [texts]}`.

    Returns:
        `{language: {source_tokens, target_tokens, token_change_pct, source_bytes_per_token,
        target_bytes_per_token, num_bytes}}`, plus an `"all"` entry over every language.
        `token_change_pct = 100 * (target - source) / source`: negative means the target needs
        fewer tokens (compresses better).
    """
    result = {}
    totals = {"source_tokens": 0, "target_tokens": 0, "num_bytes": 0}
    for language, texts in texts_by_language.items():
        src = compression(source_tokenizer, texts)
        tgt = compression(target_tokenizer, texts)
        result[language] = _compression_row(src["num_tokens"], tgt["num_tokens"], src["num_bytes"])
        totals["source_tokens"] += src["num_tokens"]
        totals["target_tokens"] += tgt["num_tokens"]
        totals["num_bytes"] += src["num_bytes"]
    if len(result) > 1:
        result["all"] = _compression_row(totals["source_tokens"], totals["target_tokens"], totals["num_bytes"])
    return result


def _compression_row(source_tokens: int, target_tokens: int, num_bytes: int) -> dict:
    return {
        "num_bytes": num_bytes,
        "source_tokens": source_tokens,
        "target_tokens": target_tokens,
        "token_change_pct": 100.0 * (target_tokens - source_tokens) / source_tokens if source_tokens else float("nan"),
        "source_bytes_per_token": num_bytes / source_tokens if source_tokens else float("nan"),
        "target_bytes_per_token": num_bytes / target_tokens if target_tokens else float("nan"),
    }
