"""Keep the source model's whole words: extend the target vocabulary instead of replacing it.

A swap replaces the vocabulary, so a word the source model reads as one token and the target tokenizer spells in
pieces (SmolLM2's " evaporation", Qwen2.5's " ev" + "aporation") loses the one row that knew it. On SmolLM2 ->
Qwen2.5 that is where the zero-shot loss sits: the questions whose choices hold such a word (bench/RESULTS.md).

Here the target tokenizer gets those words back as ordinary BPE tokens: for each word, merges that join its target
pieces left to right ("Ġev" + "aporation" -> "Ġevaporation") are appended after every existing merge, so they apply
only where the target tokenizer would have stopped, and the word's text becomes one token. Nothing else changes:
every existing token keeps its id and every text still decodes to itself; texts holding the words get shorter. The
swap then finds each added word identical (by bytes) to the source token and copies its row.

The price is the point of some swaps: the extended vocabulary is no longer exactly the target's, so token-level
distillation from a model with the target tokenizer, or drafting for one, no longer applies. It suits a swap made
for compression.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import List, Optional

from tokswap.align.vocab import token_bytes
from tokswap.errors import TokswapError

# a space, then letters (no digits, no underscore): what a reader calls a word
_WHOLE_WORD = re.compile(r" [^\W\d_]+")


class VocabExtensionError(TokswapError):
    """Raised when a tokenizer's vocabulary cannot be extended with merges."""


@dataclass
class VocabExtension:
    """What `extend_with_source_words` did.

    Attributes:
        tokenizer: the extended target tokenizer.
        words: the source words that are now one target token.
        unreached: source words whose merges were added but that a conflicting earlier merge keeps in pieces.
        intermediate_tokens: tokens the merge chains of words of three or more pieces needed on the way.
    """

    tokenizer: object
    words: List[str] = field(default_factory=list)
    unreached: List[str] = field(default_factory=list)
    intermediate_tokens: List[str] = field(default_factory=list)

    def summary(self) -> dict:
        """Counts for the swap record (`kept_source_words` in `tokswap_config.json`)."""
        return {
            "words": len(self.words),
            "intermediate_tokens": len(self.intermediate_tokens),
            "unreached": len(self.unreached),
        }


def source_only_words(source_tokenizer, target_tokenizer) -> List[str]:
    """The source vocabulary's whole words (a space, then letters) that the target tokenizer spells in pieces."""
    words = []
    for spelled in token_bytes(source_tokenizer):
        try:
            text = spelled.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if _WHOLE_WORD.fullmatch(text) and len(target_tokenizer.encode(text, add_special_tokens=False)) > 1:
            words.append(text)
    return sorted(set(words))


def _bpe_state(tokenizer) -> dict:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise VocabExtensionError(
            f"{type(tokenizer).__name__} has no fast (tokenizers) backend; load the target tokenizer with "
            "AutoTokenizer (use_fast=True) to extend it."
        )
    state = json.loads(backend.to_str())
    model = state.get("model", {})
    if model.get("type") != "BPE" or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise VocabExtensionError(
            f"the target tokenizer's model is {model.get('type')!r} with subword affixes; only plain BPE "
            "vocabularies (GPT-2 byte-level or SentencePiece-style) can be extended with merges."
        )
    return state


def extend_with_source_words(target_tokenizer, words: List[str]) -> VocabExtension:
    """A copy of `target_tokenizer` that spells each of `words` (texts, e.g. `" evaporation"`) as one token.

    Args:
        target_tokenizer: a fast tokenizer whose model is BPE.
        words: texts to make single tokens; a text the pre-tokenizer splits, or that is already one token, is skipped.

    Returns:
        `VocabExtension`: the new tokenizer, the words it reaches, and any it does not.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    state = _bpe_state(target_tokenizer)
    model = state["model"]
    vocab = model["vocab"]
    pairs_as_text = bool(model["merges"]) and isinstance(model["merges"][0], str)
    known = {tuple(m.split(" ", 1)) if pairs_as_text else tuple(m) for m in model["merges"]}
    # The added (special) tokens join the model's vocabulary at their ids: tokenizers numbers an added token the model
    # lacks after the model's vocabulary, which would move every special token behind the new words.
    for token in state.get("added_tokens", []):
        vocab.setdefault(token["content"], token["id"])
    next_id = 1 + max(vocab.values())
    normalizer = target_tokenizer.backend_tokenizer.normalizer
    pre_tokenizer = target_tokenizer.backend_tokenizer.pre_tokenizer
    # longest spellings first: their chains take the earliest ranks, so a shorter word's merge cannot cut them
    spelled = []
    for text in words:
        normalized = normalizer.normalize_str(text) if normalizer is not None else text
        if pre_tokenizer is not None and len(pre_tokenizer.pre_tokenize_str(normalized)) != 1:
            continue
        pieces = target_tokenizer.convert_ids_to_tokens(target_tokenizer.encode(text, add_special_tokens=False))
        if len(pieces) > 1:
            spelled.append((text, pieces))
    spelled.sort(key=lambda item: -len(item[1]))
    added_merges, intermediates, finals = [], [], set()
    for _, pieces in spelled:
        joined = pieces[0]
        for i, piece in enumerate(pieces[1:], start=2):
            pair, joined = (joined, piece), joined + piece
            if pair not in known:
                known.add(pair)
                added_merges.append(f"{pair[0]} {pair[1]}" if pairs_as_text else list(pair))
            if joined not in vocab:
                vocab[joined] = next_id
                next_id += 1
                if i < len(pieces):
                    intermediates.append(joined)
            if i == len(pieces):
                finals.add(joined)
    model["merges"] = list(model["merges"]) + added_merges
    backend = Tokenizer.from_str(json.dumps(state))
    extended = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        **{
            name: getattr(target_tokenizer, name)
            for name in ("bos_token", "eos_token", "unk_token", "pad_token")
            if getattr(target_tokenizer, name, None) is not None
        },
        extra_special_tokens=list(getattr(target_tokenizer, "extra_special_tokens", None) or []),
        model_max_length=target_tokenizer.model_max_length,
        padding_side=target_tokenizer.padding_side,
    )
    if getattr(target_tokenizer, "chat_template", None):
        extended.chat_template = target_tokenizer.chat_template
    reached, unreached = [], []
    for text, _ in spelled:
        (reached if len(extended.encode(text, add_special_tokens=False)) == 1 else unreached).append(text)
    intermediates = [token for token in intermediates if token not in finals]
    return VocabExtension(extended, sorted(reached), sorted(unreached), intermediates)


def keep_source_words(source_tokenizer, target_tokenizer, words: Optional[List[str]] = None) -> VocabExtension:
    """`target_tokenizer` extended with the source vocabulary's whole words it spells in pieces
    (`source_only_words`), or with `words`."""
    chosen = source_only_words(source_tokenizer, target_tokenizer) if words is None else words
    return extend_with_source_words(target_tokenizer, chosen)
