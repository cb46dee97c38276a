"""The leaderboard's text the original model writes: which carved words it starts from, and how short samples pack."""

import json


def test_corpus_carved_prompts_are_the_corpus_words_the_swap_drops_most_frequent_first(lb):
    from tokswap.carved_rows import carved_words
    from tokswap.loading import load_tokenizer

    source, target = load_tokenizer(lb.SOURCE_TOKENIZER), lb.load_target_tokenizer("qwen2.5")
    carved = set(carved_words(source, target).tolist())
    vocab = source.get_vocab()
    aptitude, theorem, the = vocab["Ġaptitude"], vocab["ĠTheorem"], vocab["Ġthe"]
    assert aptitude in carved and theorem in carved and the not in carved  # the premise, on the real pair

    texts = ["The Theorem of the aptitude test.", "An aptitude, and the Theorem's aptitude."]
    words = lb.corpus_carved_prompts(source, target, texts)
    assert words[:2] == [aptitude, theorem]  # three uses before two
    assert the not in words and set(words) <= carved
    assert all(source.convert_ids_to_tokens(i).startswith("Ġ") for i in words)


def test_short_samples_are_packed_and_long_ones_kept_whole(lb, tmp_path):
    texts = [f"sample {k} text." for k in range(40)]
    (tmp_path / "teacher_text_corpus_qwen2.5_32tok.json").write_text(json.dumps(texts), encoding="utf-8")
    (tmp_path / "teacher_text_corpus_qwen2.5.json").write_text(json.dumps(texts), encoding="utf-8")

    packed = lb.teacher_text_documents(40, str(tmp_path), "corpus", "qwen2.5", tokens=32)
    assert len(packed) == 3 and packed[0] == "\n\n".join(texts[:16]) and packed[2] == "\n\n".join(texts[32:])
    assert lb.teacher_text_documents(20, str(tmp_path), "corpus", "qwen2.5", tokens=32) == [
        "\n\n".join(texts[:16]),
        "\n\n".join(texts[16:20]),
    ]  # fewer samples are a prefix of more
    assert lb.teacher_text_documents(40, str(tmp_path), "corpus", "qwen2.5") == texts  # a window's worth: unpacked
