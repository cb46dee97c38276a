"""`tokswap.vocab_extension`: the target vocabulary extended with the source's whole words, on real tokenizers."""

import pytest
import torch
from conftest import identical_rows_alignment

from tokswap.loading import load_tokenizer
from tokswap.vocab_extension import VocabExtensionError, extend_with_source_words, keep_source_words

transformers = pytest.importorskip("transformers")

TEXTS = [
    "The evaporation of water in Yiddish folklore, photosynthesis and the Pythagorean theorem.",
    "日本語のテキストと emoji 😀🎉, Ünïcödé, and code:\n    def f(x):\n        return x ** 2\n",
    "evaporations Evaporation EVAPORATION  evaporation\t\tevaporation\n\nevaporation",
]


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2-135m")


@pytest.fixture(scope="module", params=["qwen2.5", "llama3", "gemma3", "gpt-neox"])
def extended(request, smollm2):
    target = load_tokenizer(request.param)
    return target, keep_source_words(smollm2, target)


def _boundaries(tokenizer, text):
    """Character offsets where the tokenizer's tokens of `text` end."""
    return {end for _, end in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]}


def test_every_source_word_becomes_one_token_and_nothing_else_moves(extended):
    target, extension = extended
    extended_tokenizer = extension.tokenizer
    assert len(extension.words) > 1000 and not extension.unreached
    for word in extension.words:
        assert len(extended_tokenizer.encode(word, add_special_tokens=False)) == 1, word
    # every token, special ones included, keeps its id; the new ones come after
    old, new = target.get_vocab(), extended_tokenizer.get_vocab()
    assert all(new[token] == index for token, index in old.items())
    assert sorted(set(new.values()) - set(old.values())) == list(range(len(old), len(new)))
    assert extended_tokenizer.eos_token == target.eos_token and extended_tokenizer.bos_token == target.bos_token
    assert set(extended_tokenizer.all_special_ids) == set(target.all_special_ids)


def test_texts_round_trip_and_only_lose_boundaries(extended):
    target, extension = extended
    for text in TEXTS:
        ids = extension.tokenizer.encode(text, add_special_tokens=False)
        assert extension.tokenizer.decode(ids) == text
        # merges are appended after all others, so they only join what the target would have left apart
        assert _boundaries(extension.tokenizer, text) <= _boundaries(target, text)
        assert len(ids) <= len(target.encode(text, add_special_tokens=False))
    assert len(extension.tokenizer.encode(TEXTS[0], add_special_tokens=False)) < len(
        target.encode(TEXTS[0], add_special_tokens=False)
    )


def test_save_and_reload_keeps_the_extension(smollm2, tmp_path):
    from transformers import AutoTokenizer

    target = load_tokenizer("qwen2.5")
    extension = keep_source_words(smollm2, target)
    extension.tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:
        assert reloaded.encode(text) == extension.tokenizer.encode(text)
    assert reloaded.convert_ids_to_tokens(reloaded.encode(" evaporation", add_special_tokens=False)) == ["Ġevaporation"]


def test_chains_of_three_pieces_keep_their_intermediate_tokens(smollm2):
    target = load_tokenizer("qwen2.5")
    extension = extend_with_source_words(target, [" Yiddish", " evaporation", "3 words", " the"])
    assert extension.words == [" Yiddish", " evaporation"]  # "3 words" splits in pre-tokenization, " the" is one token
    assert extension.intermediate_tokens == ["ĠYidd"]  # " Y" + "idd" + "ish" passes through " Yidd"
    assert len(extension.tokenizer) == len(target) + 3


def test_a_tokenizer_without_bpe_merges_is_refused():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    wordlevel = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, "[UNK]")))
    with pytest.raises(VocabExtensionError, match="only plain BPE"):
        extend_with_source_words(wordlevel, [" ab"])


@pytest.mark.slow
def test_swap_keeping_source_words_reads_them_as_the_original_does(smollm2):
    """SmolLM2-135M -> Qwen2.5 + SmolLM2's words: on a text both vocabularies now spell alike, the swapped model's
    logits over those tokens are the original's."""
    from tokswap.loading import load_model
    from tokswap.swapper import TokenizerSwapper

    target = load_tokenizer("qwen2.5")
    alignment = identical_rows_alignment(smollm2, keep_source_words(smollm2, target).tokenizer)
    swapper = TokenizerSwapper.from_pretrained(
        "smollm2-135m",
        "qwen2.5",
        alignment=alignment,
        init_method="mean",
        keep_source_words=True,
        dtype=torch.float32,
    )
    assert swapper.swap_record["kept_source_words"]["words"] > 5000
    original = load_model("smollm2-135m", dtype=torch.float32).eval()
    text = " The evaporation of water in the Pythagorean theorem"
    source_ids = smollm2.encode(text, add_special_tokens=False)
    target_ids = swapper.tokenizer.encode(text, add_special_tokens=False)
    assert smollm2.convert_ids_to_tokens(source_ids) == swapper.tokenizer.convert_ids_to_tokens(target_ids)
    assert "ĠPythagorean" in swapper.tokenizer.convert_ids_to_tokens(target_ids)
    with torch.no_grad():
        before = original(torch.tensor([source_ids])).logits[0][:, source_ids]
        after = swapper.model.eval()(torch.tensor([target_ids])).logits[0][:, target_ids]
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


def test_distilling_from_the_plain_target_names_the_kept_words(smollm2):
    from tokswap.distillation import DistillationError, check_teacher_compatible

    target = load_tokenizer("qwen2.5")
    extension = keep_source_words(smollm2, target)
    with pytest.raises(
        DistillationError, match=rf"extends the teacher.s .* by {len(extension.tokenizer) - len(target)} tokens"
    ) as error:
        check_teacher_compatible(extension.tokenizer, None, teacher_tokenizer=target)
    assert "keep_source_words" in str(error.value)
    # a vocabulary that merely differs keeps the general message
    with pytest.raises(DistillationError, match="differs from the student's"):
        check_teacher_compatible(smollm2, None, teacher_tokenizer=target)
