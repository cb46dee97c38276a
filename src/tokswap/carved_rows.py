"""Which source words a new token was carved from: rows the swap would otherwise throw away.

A source vocabulary often holds whole words the target spells in pieces: SmolLM2 has " evaporation" as one token,
Qwen2.5 spells it " ev" + "aporation". The swap keeps " ev" (both vocabularies have it) and must invent "aporation",
which the pieces mean builds from what its *text* splits into in the source ("ap" + "oration"): fragments with no
meaning. Meanwhile the source row that knows the word, " evaporation", belongs to no target token and is dropped.

Here each new target token that is a piece of some source-only words' target spelling is listed with those words:
"aporation" <- " evaporation", " metam" <- " metamorph", " metamorphosis". Reading "aporation" means the word was
" evaporation" (its input row), and emitting it means emitting that word (its output row), so the init
(`tokswap.init_methods.CarvedFVTInit`) gives it the mean of those words' source rows.

Only words count: a source token whose text is letters (after at most one leading space). Runs of spaces, newlines
with indentation, digits and punctuation are left out: the target's pieces of a 16-space token are spaces, and the
pieces mean already spells them (a first version that carved them too did worse than the pieces mean on Gemma-3's
code and math; CHANGELOG).

With tied embeddings one row serves both uses. For a first piece (" metam") they agree: emitting it starts the word.
For a later piece they differ (after " ev" the state predicts a piece that continues a word, which the word's row
rates lower than the pieces mean does); carving them too still did better on ARC-Easy right after the swap than first
pieces alone, for what reading the word brings (CHANGELOG).
"""

from __future__ import annotations

import re
from typing import Sequence, Tuple

import numpy as np

from tokswap.align.vocab import special_token_ids, token_bytes

# a word: letters only, after at most one leading space (no digits, no underscore, no replacement character)
WORD = re.compile(r" ?[^\W\d_]{2,}")


def carved_sources(
    source_ids: Sequence[int], source_texts: Sequence[str], target_tokenizer, new_rows: np.ndarray
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each new target row that is a piece of a source-only word's target spelling, the source words.

    Args:
        source_ids: source tokens the target vocabulary lacks (by bytes); only words among them are used (`WORD`).
        source_texts: the text of each, as the target tokenizer should read it (leading space kept).
        target_tokenizer: the new tokenizer.
        new_rows (`np.ndarray` of `bool`): target rows the swap must initialize (neither shared nor padding).

    Returns:
        `(rows, indptr, indices)`: the new target rows with at least one source word, ascending, and a CSR list of
        the source ids of each (each once, ascending). A source word spelled with one target token is skipped: the
        same bytes in one token would be a shared token, so such a spelling only arises from normalization.
    """
    keep = [k for k, text in enumerate(source_texts) if WORD.fullmatch(text)]
    texts = [source_texts[k] for k in keep]
    backend = getattr(target_tokenizer, "_tokenizer", None)
    if not texts:
        encoded = []
    elif backend is not None and hasattr(backend, "encode_batch"):
        encoded = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    else:
        encoded = target_tokenizer(texts, add_special_tokens=False)["input_ids"]
    pairs = set()
    for k, ids in zip(keep, encoded):
        if len(ids) < 2:
            continue
        for piece in ids:
            if piece < len(new_rows) and new_rows[piece]:
                pairs.add((int(piece), int(source_ids[k])))
    if not pairs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, np.zeros(1, dtype=np.int64), empty
    table = np.array(sorted(pairs), dtype=np.int64)
    rows, counts = np.unique(table[:, 0], return_counts=True)
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return rows, indptr, table[:, 1].copy()


def carved_words(source_tokenizer, target_tokenizer) -> np.ndarray:
    """Source ids of the whole words the target vocabulary lacks and spells in two or more pieces, ascending.

    These are the words a swap takes apart (" evaporation" -> " ev" + "aporation"), so the ones whose use the swapped
    model must learn again. In a BPE vocabulary a lower id is an earlier merge, so the list runs roughly from the most
    to the least frequent word of the source model's training text.
    """
    target_bytes = set(token_bytes(target_tokenizer))
    specials = special_token_ids(source_tokenizer)
    ids, texts = [], []
    for i, raw in enumerate(token_bytes(source_tokenizer)):
        if i in specials or raw is None or raw in target_bytes:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:  # a piece of a character: not a word
            continue
        if WORD.fullmatch(text):
            ids.append(i)
            texts.append(text)
    encoded = target_tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    return np.array([i for i, pieces in zip(ids, encoded) if len(pieces) >= 2], dtype=np.int64)
