"""What each token *is*, as bytes: the ground on which two vocabularies meet.

Tokenizers spell the same piece of text differently: GPT-2-style byte-level BPE writes " word" as
`Ġword`, SentencePiece writes it `▁word`, byte-fallback vocabularies carry `<0x20>`, WordPiece marks
continuations with `##`. Comparing token *strings* therefore misses most of the overlap between two
vocabularies. This module decodes every token id to the raw bytes it stands for, pairs up tokens
whose bytes are equal, and maps special tokens (bos, eos, pad, unk, chat-template markers) by role.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

import numpy as np

from tokswap.alignment import AlignmentError
from tokswap.utils import get_logger

logger = get_logger(__name__)

METASPACE = "\u2581"  # "▁", SentencePiece's visible space

__all__ = [
    "IdenticalPairs",
    "SpecialTokenPairs",
    "identical_token_pairs",
    "special_token_ids",
    "special_token_pairs",
    "token_bytes",
    "tokenizer_scheme",
]


@lru_cache(maxsize=1)
def _byte_level_decoder_table() -> dict:
    """The inverse of GPT-2's `bytes_to_unicode`: printable stand-in character -> byte value."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    byte_values = printable[:]
    chars = printable[:]
    shift = 0
    for value in range(256):
        if value not in printable:
            byte_values.append(value)
            chars.append(256 + shift)
            shift += 1
    return {chr(c): b for b, c in zip(byte_values, chars)}


def _backend(tokenizer):
    """The `tokenizers.Tokenizer` behind a transformers fast tokenizer (or the object itself)."""
    import tokenizers

    if isinstance(tokenizer, tokenizers.Tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if isinstance(backend, tokenizers.Tokenizer):
        return backend
    raise AlignmentError(
        f"{type(tokenizer).__name__} is not a fast (Rust `tokenizers`) tokenizer, so its tokens cannot be "
        "decoded to bytes. Load it with `AutoTokenizer.from_pretrained(..., use_fast=True)` or convert it "
        "to a tokenizer.json first."
    )


def _walk(node) -> list:
    """Every component dict in a (possibly nested `Sequence`) normalizer/pre-tokenizer/decoder."""
    if node is None:
        return []
    found = [node]
    for key in ("decoders", "pretokenizers", "normalizers"):
        for child in node.get(key) or []:
            found.extend(_walk(child))
    return found


_MEMO: dict = {}


def _memo(tokenizer, what: str, compute):
    """Per-tokenizer-object cache: serializing a 262k-token tokenizer to JSON takes seconds, and the
    pipeline asks the same object several times. Keyed by identity, checked against the size."""
    size = _backend(tokenizer).get_vocab_size(True)
    key = (id(tokenizer), what)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is tokenizer and hit[1] == size:
        return hit[2]
    value = compute()
    if len(_MEMO) >= 32:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[key] = (tokenizer, size, value)
    return value


def tokenizer_scheme(tokenizer) -> dict:
    """How a tokenizer writes text into tokens, read from its backend JSON.

    Returns:
        `dict` with `model` (BPE/WordPiece/Unigram/WordLevel), `byte_level` (GPT-2 byte alphabet),
        `metaspace` (`▁` stands for a space), `byte_fallback` (`<0xNN>` tokens are bytes) and
        `continuing_subword_prefix` (WordPiece's `##`, or None).
    """
    return dict(_memo(tokenizer, "scheme", lambda: _scheme(tokenizer)))


def _scheme(tokenizer) -> dict:
    spec = json.loads(_backend(tokenizer).to_str())
    model = spec.get("model") or {}
    parts = _walk(spec.get("decoder")) + _walk(spec.get("pre_tokenizer")) + _walk(spec.get("normalizer"))
    types = {part.get("type") for part in parts}
    metaspace = "Metaspace" in types or any(
        part.get("type") == "Replace"
        and (part.get("pattern") or {}).get("String") in (METASPACE, " ")
        and part.get("content") in (" ", METASPACE)
        for part in parts
    )
    prefix = None
    if model.get("type") == "WordPiece":
        prefix = model.get("continuing_subword_prefix") or "##"
    return {
        "model": model.get("type"),
        "byte_level": "ByteLevel" in types,
        "metaspace": metaspace,
        "byte_fallback": bool(model.get("byte_fallback")) or "ByteFallback" in types,
        "continuing_subword_prefix": prefix,
    }


def _byte_fallback_value(token: str) -> Optional[int]:
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        try:
            return int(token[3:5], 16)
        except ValueError:
            return None
    return None


def _vocab_by_id(tokenizer) -> list:
    return _memo(tokenizer, "vocab_by_id", lambda: _compute_vocab_by_id(tokenizer))


def _compute_vocab_by_id(tokenizer) -> list:
    backend = _backend(tokenizer)
    vocab = backend.get_vocab(with_added_tokens=True)
    size = max(vocab.values()) + 1 if vocab else 0
    tokens = [None] * size
    for token, idx in vocab.items():
        tokens[idx] = token
    return tokens


def token_bytes(tokenizer) -> list:
    """The raw bytes each token id stands for, or None where a token has no byte meaning.

    Byte-level BPE pieces (`Ġword`) are mapped back through GPT-2's byte alphabet, SentencePiece
    pieces have `▁` turned into a space, byte-fallback tokens `<0xNN>` become that single byte,
    WordPiece continuations lose their `##` (word-initial WordPiece tokens decode without a space,
    as the BERT decoder prints them), and added/special tokens are their content as UTF-8.

    Args:
        tokenizer: a transformers fast tokenizer or a `tokenizers.Tokenizer`.

    Returns:
        `list[Optional[bytes]]` indexed by token id, covering every id up to the largest one.

    Raises:
        AlignmentError: the tokenizer is not a fast tokenizer, or none of its tokens decodes.
    """
    return _memo(tokenizer, "token_bytes", lambda: _compute_token_bytes(tokenizer))


def _compute_token_bytes(tokenizer) -> list:
    scheme = tokenizer_scheme(tokenizer)
    tokens = _vocab_by_id(tokenizer)
    table = _byte_level_decoder_table()
    result: list = [None] * len(tokens)
    prefix = scheme["continuing_subword_prefix"]
    for idx, token in enumerate(tokens):
        if token is None:
            continue
        if scheme["byte_fallback"]:
            value = _byte_fallback_value(token)
            if value is not None:
                result[idx] = bytes([value])
                continue
        if scheme["byte_level"]:
            try:
                result[idx] = bytes(table[char] for char in token)
            except KeyError:
                result[idx] = None  # a character outside the byte alphabet: no byte meaning
            continue
        text = token
        if prefix is not None and text.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix) :]
        if scheme["metaspace"]:
            text = text.replace(METASPACE, " ")
        result[idx] = text.encode("utf-8", "surrogatepass")
    # Added tokens are matched on raw text before the model runs: their content is what they mean.
    for idx, added in _backend(tokenizer).get_added_tokens_decoder().items():
        if idx >= len(result):
            continue
        content = added.content
        if scheme["metaspace"] and added.normalized:
            content = content.replace(METASPACE, " ")
        result[idx] = content.encode("utf-8", "surrogatepass")
    if not any(value for value in result):
        raise AlignmentError(
            f"None of the {len(result)} tokens of {getattr(tokenizer, 'name_or_path', 'this tokenizer')!r} "
            "decodes to bytes; tokswap needs a BPE, Unigram or WordPiece tokenizer with a tokenizer.json."
        )
    return result


def special_token_ids(tokenizer) -> set:
    """Ids of the tokenizer's special (control) tokens: added tokens flagged special."""
    ids = {idx for idx, added in _backend(tokenizer).get_added_tokens_decoder().items() if added.special}
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            ids.add(value)
    return ids


@dataclass
class IdenticalPairs:
    """Target tokens whose bytes exist in the source vocabulary, paired with that source token.

    Args:
        target_ids / source_ids (`np.ndarray` of int64): the pairs, sorted by target id.
        raw_string_count (`int`): target tokens whose *string* is also a source token string (what a
            naive comparison of `get_vocab()` keys finds).
        byte_level_count (`int`): target tokens paired by bytes (`len(target_ids)`).
    """

    target_ids: np.ndarray
    source_ids: np.ndarray
    raw_string_count: int
    byte_level_count: int

    def as_dict(self) -> dict:
        return dict(zip(self.target_ids.tolist(), self.source_ids.tolist()))

    def __len__(self) -> int:
        return len(self.target_ids)


def _source_preference(source_tokens: list, source_bytes: list, source_specials: set, scheme: dict):
    """bytes -> the source id that should stand for them: a regular token over a special, added or
    `<0xNN>` one (those are only used when nothing else fits), then the lowest id."""
    best: dict = {}
    for idx, value in enumerate(source_bytes):
        if not value:
            continue
        token = source_tokens[idx]
        penalty = 0
        if idx in source_specials:
            penalty = 2
        elif scheme["byte_fallback"] and token is not None and _byte_fallback_value(token) is not None:
            penalty = 1
        rank = (penalty, idx)
        current = best.get(value)
        if current is None or rank < current[0]:
            best[value] = (rank, idx)
    return {value: idx for value, (rank, idx) in best.items()}


def identical_token_pairs(source_tokenizer, target_tokenizer, include_special: bool = False) -> IdenticalPairs:
    """Pair every target token with the source token that decodes to the same bytes.

    Special (control) tokens on either side are left out unless `include_special`: they are mapped
    by role (`special_token_pairs`), since `<|endoftext|>` may mean different things to two models.

    Args:
        source_tokenizer / target_tokenizer: fast tokenizers (or `tokenizers.Tokenizer`).
        include_special (`bool`, defaults to `False`): also pair special tokens by their content.

    Returns:
        `IdenticalPairs`.
    """
    source_bytes = token_bytes(source_tokenizer)
    target_bytes = token_bytes(target_tokenizer)
    source_tokens = _vocab_by_id(source_tokenizer)
    target_tokens = _vocab_by_id(target_tokenizer)
    source_specials = special_token_ids(source_tokenizer)
    target_specials = set() if include_special else special_token_ids(target_tokenizer)
    if not include_special:
        source_bytes = [None if i in source_specials else b for i, b in enumerate(source_bytes)]
    lookup = _source_preference(source_tokens, source_bytes, source_specials, tokenizer_scheme(source_tokenizer))
    target_ids, source_ids = [], []
    for idx, value in enumerate(target_bytes):
        if not value or idx in target_specials:
            continue
        match = lookup.get(value)
        if match is not None:
            target_ids.append(idx)
            source_ids.append(match)
    source_strings = {token for token in source_tokens if token is not None}
    raw = sum(
        1
        for idx, token in enumerate(target_tokens)
        if token is not None and token in source_strings and idx not in target_specials
    )
    return IdenticalPairs(
        target_ids=np.asarray(target_ids, dtype=np.int64),
        source_ids=np.asarray(source_ids, dtype=np.int64),
        raw_string_count=int(raw),
        byte_level_count=len(target_ids),
    )


# Roles of control tokens, with the spellings the common model families use, most canonical first.
SPECIAL_ROLES: dict = {
    "bos": ["<|begin_of_text|>", "<bos>", "<s>", "<|startoftext|>", "[CLS]"],
    "eos": ["<|endoftext|>", "<|end_of_text|>", "<eos>", "</s>", "[SEP]"],
    "turn_start": ["<|im_start|>", "<start_of_turn>", "<|start_header_id|>", "<|user|>"],
    "turn_end": ["<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>"],
    "header_end": ["<|end_header_id|>"],
    "pad": ["<pad>", "<|padding|>", "[PAD]", "<|pad|>", "<|finetune_right_pad_id|>"],
    "unk": ["<unk>", "[UNK]", "<|unk|>"],
    "mask": ["<mask>", "[MASK]"],
    "fim_prefix": ["<|fim_prefix|>", "<fim_prefix>"],
    "fim_middle": ["<|fim_middle|>", "<fim_middle>"],
    "fim_suffix": ["<|fim_suffix|>", "<fim_suffix>"],
    "fim_pad": ["<|fim_pad|>", "<fim_pad>"],
}
# When the source has no token for a role, the next role in this chain stands in for it.
ROLE_FALLBACKS: dict = {
    "bos": ["eos"],
    "eos": ["turn_end"],
    "turn_start": ["bos", "eos"],
    "turn_end": ["eos"],
    "header_end": ["turn_start", "eos"],
    "pad": ["eos"],
    "unk": ["eos"],
    "mask": ["unk", "pad", "eos"],
}
_ATTRIBUTE_ROLES = {"bos": "bos_token", "eos": "eos_token", "pad": "pad_token", "unk": "unk_token"}


def _roles(tokenizer) -> dict:
    """role -> token id for one tokenizer: known spellings first, then its bos/eos/pad/unk settings."""
    backend = _backend(tokenizer)
    vocab = backend.get_vocab(with_added_tokens=True)
    # Only added tokens count: Qwen's BPE vocabulary holds "<s>" and "<unk>" as ordinary text pieces.
    added = {token.content: idx for idx, token in backend.get_added_tokens_decoder().items()}
    roles: dict = {}
    for role, spellings in SPECIAL_ROLES.items():
        for spelling in spellings:
            if spelling in added:
                roles[role] = added[spelling]
                break
    for role, attr in _ATTRIBUTE_ROLES.items():
        value = getattr(tokenizer, attr, None)
        if role not in roles and value is not None and str(value) in vocab:
            token_id = vocab[str(value)]
            if token_id not in roles.values():
                roles[role] = token_id
    return roles


class SpecialTokenPairs(dict):
    """`dict` target id -> source id for control tokens, with `details`: one record per target
    role, `{"role", "target_token", "source_token", "source_role", "fallback"}`."""

    def __init__(self, pairs=(), details=()):
        super().__init__(pairs)
        self.details = list(details)


def special_token_pairs(source_tokenizer, target_tokenizer) -> SpecialTokenPairs:
    """Map the target's control tokens to the source's by role, never by chance.

    A target role the source lacks falls back along `ROLE_FALLBACKS` (e.g. target pad -> source
    eos); each fallback is recorded in `details` and logged. Roles with no stand-in (e.g. FIM
    markers a source model never saw) are left out: the alignment then splits their text.
    """
    source_roles, target_roles = _roles(source_tokenizer), _roles(target_tokenizer)
    source_vocab = _vocab_by_id(source_tokenizer)
    target_vocab = _vocab_by_id(target_tokenizer)
    pairs, details = {}, []
    for role, target_id in target_roles.items():
        if target_id in pairs:
            continue  # one token serving two roles (e.g. Qwen's pad is its eos): the first role wins
        chain = [role] + ROLE_FALLBACKS.get(role, [])
        for source_role in chain:
            if source_role in source_roles:
                source_id = source_roles[source_role]
                pairs[target_id] = source_id
                fallback = source_role != role
                details.append(
                    {
                        "role": role,
                        "target_token": target_vocab[target_id],
                        "source_token": source_vocab[source_id],
                        "source_role": source_role,
                        "fallback": fallback,
                    }
                )
                if fallback:
                    logger.info(
                        "Target %s %r has no source counterpart; using the source %s %r.",
                        role,
                        target_vocab[target_id],
                        source_role,
                        source_vocab[source_id],
                    )
                break
    return SpecialTokenPairs(pairs, details)
