"""The alignment pipeline end to end, its errors, and the TokenAlignment file format."""

import json

import numpy as np
import pytest

from tokswap.align.pipeline import (
    AlignmentConfig,
    CorpusTooSmallError,
    NoOverlapError,
    align_tokenizers,
    build_alignment,
    calibrate_match_gate,
)
from tokswap.align.quality import baseline_alignment, bleu1, source_to_target_map
from tokswap.alignment import AlignmentError, RowSource, TokenAlignment, tokenizer_fingerprint
from tokswap.cli.align import register_cli

pytestmark = pytest.mark.usefixtures("hub")  # talks to the loopback Hub


@pytest.fixture(scope="module")
def tokenizers():
    from tokswap.loading import load_tokenizer

    return {name: load_tokenizer(name) for name in ("smollm2", "qwen2.5", "gpt-neox")}


@pytest.fixture(scope="module")
def tiny_alignment(tokenizers):
    """SmolLM2 -> Qwen2.5 on 300 KB of the default corpus, 32-dim GloVe, 5 iterations."""
    from tokswap.offline.corpus import build_corpus

    corpus = build_corpus(total_bytes=300_000, seed=0)
    config = AlignmentConfig(
        dim=32,
        iterations=5,
        min_count=3,
        semantic_similarity=False,
        cache=False,
        min_corpus_tokens=10_000,
        min_match_precision=None,
    )  # every GloVe match kept
    alignment = align_tokenizers(
        tokenizers["smollm2"], tokenizers["qwen2.5"], corpus=corpus, config=config, progress=False
    )
    return alignment, corpus


def _word_lists(corpus, n=30):
    return [t for t in corpus["test"]["text"][:n] if t.strip()]


@pytest.mark.slow
def test_tiny_end_to_end_alignment_beats_random(tokenizers, tiny_alignment):
    alignment, corpus = tiny_alignment
    source, target = tokenizers["smollm2"], tokenizers["qwen2.5"]
    assert alignment.num_target_rows == len(target)
    assert alignment.target_to_source.max() < len(source)
    counts = alignment.counts_by_row_source()
    assert counts["identical"] > 30000 and counts["glove"] > 100 and counts["special"] >= 2
    metrics = alignment.config["metrics"]
    texts = _word_lists(corpus)
    src_ids = source(texts, add_special_tokens=False)["input_ids"]
    tgt_ids = target(texts, add_special_tokens=False)["input_ids"]
    ours = bleu1(alignment, src_ids, tgt_ids, num_source_rows=len(source))
    random = bleu1(baseline_alignment("random_permutation", source, target), src_ids, tgt_ids, len(source))
    byte_identical = bleu1(baseline_alignment("byte_identical_random", source, target), src_ids, tgt_ids, len(source))
    assert ours > random + 0.3
    assert ours >= byte_identical
    assert metrics["bleu1"] > 0.3
    # The self-check recovers held-out identical pairs far above chance (1 / thousands of candidates).
    assert metrics["self_check_precision_at_10"] > 0.05
    assert metrics["max_in_degree"] <= metrics["max_in_degree_without_hubness_correction"]
    # Provenance.
    config = alignment.config
    assert config["source_tokenizer"] == tokenizer_fingerprint(source)
    assert config["hyperparameters"]["dim"] == 32 and config["hyperparameters"]["window"] == 15
    assert len(config["corpus"]["sha256"]) == 64 and config["tokswap_version"]


@pytest.mark.slow
def test_fallback_rows_use_the_pieces_of_their_text(tokenizers, tiny_alignment):
    alignment, _ = tiny_alignment
    source, target = tokenizers["smollm2"], tokenizers["qwen2.5"]
    fallback = np.flatnonzero(alignment.row_sources == RowSource.FALLBACK)
    assert len(fallback) > 1000
    for target_id in fallback[:: max(1, len(fallback) // 50)]:
        pieces = alignment.fallback_sources(int(target_id))
        assert len(pieces) >= 1
        assert alignment.target_to_source[target_id] in pieces
        text = target.decode([int(target_id)])
        if "\ufffd" not in text and text:
            assert list(pieces) == source.encode(text, add_special_tokens=False)


@pytest.mark.slow
def test_save_load_round_trip_and_hash_refusal(tokenizers, tiny_alignment, tmp_path):
    alignment, _ = tiny_alignment
    alignment.save_pretrained(tmp_path / "al")
    loaded = TokenAlignment.from_pretrained(tmp_path / "al")
    for name in (
        "target_to_source",
        "scores",
        "row_sources",
        "fallback_indptr",
        "fallback_indices",
        "source_to_target",
    ):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(alignment, name))
    assert loaded.config["metrics"]["bleu1"] == pytest.approx(alignment.config["metrics"]["bleu1"])
    loaded.verify(tokenizers["smollm2"], tokenizers["qwen2.5"])
    with pytest.raises(AlignmentError, match="source tokenizer"):
        loaded.verify(tokenizers["gpt-neox"], tokenizers["qwen2.5"])


def test_reference_json_import(tokenizers, tmp_path):
    target = tokenizers["gpt-neox"]
    mapping = {str(i): (i * 7) % 1000 for i in range(len(target))}
    path = tmp_path / "align.json"
    path.write_text(json.dumps(mapping))
    imported = TokenAlignment.from_reference_json(path, target_tokenizer=target)
    assert imported.target_to_source[123] == (123 * 7) % 1000
    assert (imported.row_sources == RowSource.IMPORTED).all()
    del mapping["5"]
    path.write_text(json.dumps(mapping))
    with pytest.raises(AlignmentError, match="missing"):
        TokenAlignment.from_reference_json(path, target_tokenizer=target)


def test_source_to_target_map_prefers_identical_then_score():
    alignment = TokenAlignment(
        target_to_source=np.array([0, 0, 1, 1, 2]),
        scores=np.array([0.5, 1.0, 0.9, 0.2, 0.3], dtype=np.float32),
        row_sources=np.array(
            [RowSource.GLOVE, RowSource.IDENTICAL, RowSource.GLOVE, RowSource.GLOVE, RowSource.GLOVE], dtype=np.int8
        ),
    )
    mapping = source_to_target_map(alignment, 4)
    assert mapping[0] == 1 and mapping[1] == 2 and mapping[2] == 4
    assert 0 <= mapping[3] < 5  # no target maps to source 3: a seeded random target


def test_bleu1_brevity_and_clipping():
    identity = np.arange(10)
    assert bleu1(identity, [[1, 2, 3]], [[1, 2, 3]]) == pytest.approx(1.0)
    assert bleu1(identity, [[1, 1, 1]], [[1, 2, 3]]) == pytest.approx(1 / 3)
    assert bleu1(identity, [[1]], [[1, 2]]) == pytest.approx(np.exp(1 - 2))


def _word_level_tokenizer(words):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_no_overlap_and_too_few_pairs_are_refused():
    source = _word_level_tokenizer(["alpha", "beta", "gamma"])
    target = _word_level_tokenizer(["delta", "eps", "zeta"])
    rng = np.random.default_rng(0)
    vectors = lambda n: rng.normal(size=(n, 8)).astype(np.float32)  # noqa: E731
    with pytest.raises(NoOverlapError, match="share no token"):
        build_alignment(source, target, vectors(4), np.ones(4, bool), vectors(4), np.ones(4, bool))
    target = _word_level_tokenizer(["alpha", "beta", "zeta"])
    with pytest.raises(NoOverlapError, match="at least 50"):
        build_alignment(source, target, vectors(4), np.ones(4, bool), vectors(4), np.ones(4, bool))


def test_small_corpus_is_refused(tokenizers):
    with pytest.raises(CorpusTooSmallError, match="tokens are needed"):
        align_tokenizers(
            tokenizers["smollm2"],
            tokenizers["qwen2.5"],
            corpus=["a short text"] * 20,
            config=AlignmentConfig(cache=False),
            progress=False,
        )


def test_cli_registers_align():
    import argparse

    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(
        [
            "align",
            "smollm2",
            "qwen2.5",
            "--output",
            "out",
            "--dim",
            "64",
            "--hubness-correction",
            "none",
            "--no-semantic-similarity",
        ]
    )
    assert args.dim == 64 and args.hubness_correction == "none" and args.semantic_similarity is False
    assert args.func.__name__ == "_cli_align"


def test_match_gate_threshold_reaches_the_asked_precision():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    correct = np.array([True, True, False, True, False, False])
    assert calibrate_match_gate(scores, correct, None)["threshold"] is None
    gate = calibrate_match_gate(scores, correct, 0.75)  # top 4: 3/4 right; top 5: 3/5
    assert gate["threshold"] == 0.6 and gate["holdout_kept"] == 4 and gate["holdout_kept_precision"] == 0.75
    assert calibrate_match_gate(scores, correct, 1.0)["threshold"] == 0.8
    assert calibrate_match_gate(scores, np.zeros(6, bool), 0.5)["threshold"] == float("inf")


@pytest.mark.slow
def test_gated_alignment_sends_unconfident_matches_to_the_pieces_fallback(tokenizers, tiny_alignment):
    ungated, corpus = tiny_alignment  # same settings and (deterministic) GloVe vectors, no gate
    common = dict(dim=32, iterations=5, min_count=3, semantic_similarity=False, cache=False, min_corpus_tokens=10_000)
    source, target = tokenizers["smollm2"], tokenizers["qwen2.5"]
    assert AlignmentConfig().min_match_precision == 0.9  # gated by default
    gated = align_tokenizers(
        source, target, corpus=corpus, progress=False, config=AlignmentConfig(min_match_precision=0.6, **common)
    )
    gate = gated.config["metrics"]["match_gate"]
    counts, counts_ungated = gated.counts_by_row_source(), ungated.counts_by_row_source()
    assert gate["threshold"] is not None and gate["rejected"] > 0
    assert counts["glove"] == counts_ungated["glove"] - gate["rejected"]
    assert counts["fallback"] == counts_ungated["fallback"] + gate["rejected"]
    glove = gated.row_sources == RowSource.GLOVE
    # Same vectors, same matches: the kept rows are unchanged, the rejected ones now have their pieces.
    assert np.array_equal(gated.target_to_source[glove], ungated.target_to_source[glove])
    rejected = (ungated.row_sources == RowSource.GLOVE) & ~glove
    assert all(len(gated.fallback_sources(int(t))) > 0 for t in np.flatnonzero(rejected)[:50])


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("iterations", 0, r"iterations \(--iterations\) must be an integer >= 1, got 0"),
        ("dim", -8, r"dim \(--dim\) must be an integer >= 1"),
        ("window", 0, r"--window\) must be an integer >= 1"),
        ("min_count", 0, r"--min-count\) must be an integer >= 1"),
        ("batch_size", 0, r"--batch-size\) must be an integer >= 1"),
        ("learning_rate", 0.0, r"--learning-rate\) must be a finite number > 0"),
        ("holdout_fraction", 1.0, r"--holdout-fraction\) must be in \[0, 1\)"),
        ("method", "nearest", r"method \(--method\) must be 'procrustes' or 'relative'"),
    ],
)
def test_config_ranges_are_checked(option, value, message):
    with pytest.raises(AlignmentError, match=message):
        AlignmentConfig(**{option: value})
