"""Byte-level token identity across tokenizer families, and special tokens mapped by role."""

import pytest

from tokswap.align.vocab import identical_token_pairs, special_token_pairs, token_bytes, tokenizer_scheme
from tokswap.alignment import AlignmentError


@pytest.fixture(scope="module")
def tokenizers():
    from tokswap.loading import load_tokenizer

    return {name: load_tokenizer(name) for name in ("gpt-neox", "gemma3", "llama3", "qwen2.5", "bert-uncased")}


def _only_id(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) == 1, (text, ids)
    return ids[0]


def test_schemes_are_detected(tokenizers):
    assert tokenizer_scheme(tokenizers["gpt-neox"])["byte_level"]
    gemma = tokenizer_scheme(tokenizers["gemma3"])
    assert gemma["metaspace"] and gemma["byte_fallback"] and not gemma["byte_level"]
    assert tokenizer_scheme(tokenizers["bert-uncased"])["continuing_subword_prefix"] == "##"


@pytest.mark.parametrize("name", ["gpt-neox", "gemma3", "llama3", "qwen2.5"])
def test_a_word_decodes_to_its_bytes(tokenizers, name):
    tokenizer = tokenizers[name]
    values = token_bytes(tokenizer)
    ids = tokenizer.encode(" hello world", add_special_tokens=False)
    assert b"".join(values[i] for i in ids) == b" hello world"
    # Multi-byte UTF-8 split over byte-level pieces still concatenates to the right bytes.
    ids = tokenizer.encode(" Grüße, 世界", add_special_tokens=False)
    assert b"".join(values[i] for i in ids) == " Grüße, 世界".encode()


def test_the_same_word_meets_its_equal_across_families(tokenizers):
    neox, gemma, llama = tokenizers["gpt-neox"], tokenizers["gemma3"], tokenizers["llama3"]
    for source, target in ((neox, gemma), (gemma, neox), (llama, gemma), (neox, llama)):
        pairs = identical_token_pairs(source, target).as_dict()
        for word in (" hello", " world", "the"):
            assert pairs[_only_id(target, word)] == _only_id(source, word), word


def test_byte_fallback_tokens_meet_single_byte_tokens(tokenizers):
    neox, gemma = tokenizers["gpt-neox"], tokenizers["gemma3"]
    gemma_vocab, neox_bytes = gemma.get_vocab(), token_bytes(neox)
    neox_c3 = neox_bytes.index(b"\xc3")  # the byte-level token "Ã"
    assert identical_token_pairs(gemma, neox).as_dict()[neox_c3] == gemma_vocab["<0xC3>"]
    assert identical_token_pairs(neox, gemma).as_dict()[gemma_vocab["<0xC3>"]] == neox_c3


def test_byte_level_finds_more_than_raw_strings(tokenizers):
    pairs = identical_token_pairs(tokenizers["gpt-neox"], tokenizers["gemma3"])
    assert pairs.byte_level_count > 2 * pairs.raw_string_count
    same_family = identical_token_pairs(tokenizers["gpt-neox"], tokenizers["qwen2.5"])
    assert same_family.byte_level_count == same_family.raw_string_count > 30000


def test_wordpiece_continuations_lose_their_prefix(tokenizers):
    bert = tokenizers["bert-uncased"]
    values = token_bytes(bert)
    vocab = bert.get_vocab()
    assert values[vocab["##ing"]] == b"ing"
    assert values[vocab["hello"]] == b"hello"
    assert values[vocab["[CLS]"]] == b"[CLS]"


def test_special_tokens_map_by_role(tokenizers):
    llama, gemma, neox, qwen = (tokenizers[n] for n in ("llama3", "gemma3", "gpt-neox", "qwen2.5"))
    pairs = special_token_pairs(llama, gemma)
    gv, lv = gemma.get_vocab(), llama.get_vocab()
    assert pairs[gv["<bos>"]] == lv["<|begin_of_text|>"]
    assert pairs[gv["<eos>"]] == lv["<|end_of_text|>"]
    assert pairs[gv["<start_of_turn>"]] == lv["<|start_header_id|>"]
    assert pairs[gv["<end_of_turn>"]] == lv["<|eot_id|>"]
    # Gemma's pad has no Llama-3 counterpart: falls back to eos, and says so.
    assert pairs[gv["<pad>"]] == lv["<|end_of_text|>"]
    assert any(d["role"] == "pad" and d["fallback"] and d["source_role"] == "eos" for d in pairs.details)

    pairs = special_token_pairs(neox, qwen)
    qv, nv = qwen.get_vocab(), neox.get_vocab()
    assert pairs[qv["<|endoftext|>"]] == nv["<|endoftext|>"]
    assert pairs[qv["<|im_end|>"]] == nv["<|endoftext|>"]
    # Qwen's BPE vocabulary holds "<s>" as plain text: it is not a bos token.
    assert qv["<s>"] not in pairs


def test_tokens_that_cannot_be_decoded_are_refused():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    with pytest.raises(AlignmentError, match="not a fast"):
        token_bytes(object())
    empty = Tokenizer(WordLevel({}, unk_token="[UNK]"))
    with pytest.raises(AlignmentError, match="decodes to bytes"):
        token_bytes(empty)
