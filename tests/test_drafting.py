"""Draft models for speculative decoding: exact vocabulary, generation settings, lossless assisted generation."""

import contextlib
import copy

import numpy as np
import pytest
import torch
import transformers
from conftest import tiny_llama

from tokswap.alignment import RowSource, TokenAlignment, tokenizer_fingerprint
from tokswap.drafting import (
    DraftError,
    check_draft_compatible,
    decode_step_seconds,
    expected_speedup,
    frequency_ranked_head,
    greedy_agreement,
    load_draft_pair,
    load_frequency_ranked_tokens,
    measure_speculative_decoding,
    rank_tokens_by_frequency,
    small_batch_matmul,
)
from tokswap.init_methods import source_pieces
from tokswap.swapper import make_draft

pytestmark = pytest.mark.usefixtures("hub")  # talks to the loopback Hub

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog, and the dog sleeps.",
    "for i in range(10):\n    print(i * i)\n",
    "A draft model proposes tokens; the big model checks them all in one forward pass.",
] * 20
PROMPTS = ["def add(a, b):", "The quick brown", "for i in range(3):"]


def _pieces_alignment(source_tokenizer, target_tokenizer) -> TokenAlignment:
    """Identical tokens map directly; every other target token is the mean of its source pieces."""
    source_vocab = source_tokenizer.get_vocab()
    n = len(target_tokenizer)
    target_to_source = np.zeros(n, dtype=np.int64)
    codes = np.full(n, RowSource.FALLBACK, dtype=np.int8)
    for token, target_id in target_tokenizer.get_vocab().items():
        if token in source_vocab and target_id < n:
            target_to_source[target_id], codes[target_id] = source_vocab[token], RowSource.IDENTICAL
    fallback = np.flatnonzero(codes == RowSource.FALLBACK)
    piece_indptr, pieces = source_pieces(source_tokenizer, target_tokenizer, fallback, len(source_tokenizer))
    lengths = np.zeros(n, dtype=np.int64)
    lengths[fallback] = np.diff(piece_indptr)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return TokenAlignment(
        target_to_source=target_to_source,
        row_sources=codes,
        fallback_indptr=indptr,
        fallback_indices=pieces,
        config={
            "source_tokenizer": tokenizer_fingerprint(source_tokenizer),
            "target_tokenizer": tokenizer_fingerprint(target_tokenizer),
        },
    )


def _tiny_llama(tokenizer, vocab_size, seed, layers=2):
    model = tiny_llama(vocab_size, tokenizer=tokenizer, ids=("bos", "eos"), seed=seed, layers=layers, max_positions=256)
    return model.eval()


@pytest.fixture(scope="module")
def pair(tmp_path_factory, train_bpe_tokenizer):
    """(small model folder + tokenizer, big model folder + tokenizer): different BPE vocabularies."""
    small_tok = train_bpe_tokenizer(TEXTS, 300)
    big_tok = train_bpe_tokenizer(TEXTS[::-1] + ["extra words for a different vocabulary"] * 5, 360)
    root = tmp_path_factory.mktemp("draft-pair")
    small, big = root / "small", root / "big"
    _tiny_llama(small_tok, len(small_tok), seed=0).save_pretrained(small)
    small_tok.save_pretrained(small)
    big_model = _tiny_llama(big_tok, len(big_tok) + 29, seed=1, layers=3)  # padded: vocab_size > len(tokenizer)
    big_model.generation_config.eos_token_id = big_tok.eos_token_id
    big_model.save_pretrained(big)
    big_tok.save_pretrained(big)
    return small, small_tok, big, big_tok


@pytest.fixture(scope="module")
def draft(pair):
    small, small_tok, big, big_tok = pair
    return make_draft(str(small), str(big), alignment=_pieces_alignment(small_tok, big_tok))


def test_draft_has_the_big_models_exact_vocabulary_and_settings(pair, draft):
    _, _, big, big_tok = pair
    big_model = transformers.AutoModelForCausalLM.from_pretrained(big)
    assert draft.model.config.vocab_size == big_model.config.vocab_size == len(big_tok) + 29
    assert draft.model.get_input_embeddings().weight.shape[0] == big_model.config.vocab_size
    assert draft.model.get_output_embeddings().weight.shape[0] == big_model.config.vocab_size
    assert draft.model.config.eos_token_id == big_model.config.eos_token_id
    assert draft.model.generation_config.eos_token_id == big_model.generation_config.eos_token_id
    assert draft.swap_record["draft_for"] == str(big)
    check_draft_compatible(big_model, draft.model)


def test_load_draft_pair_can_load_the_draft_alone_in_bfloat16(pair, draft, tmp_path):
    _, _, big, _ = pair
    draft.save_pretrained(tmp_path / "draft")
    model, tokenizer, assistant = load_draft_pair(big, tmp_path / "draft", draft_dtype=torch.bfloat16)
    assert model.dtype == torch.float32 and assistant.dtype == torch.bfloat16
    assert assistant.config.vocab_size == model.config.vocab_size
    assert tokenizer.eos_token_id == model.generation_config.eos_token_id


@pytest.mark.slow
def test_assisted_generation_is_lossless_and_counts_acceptance(pair, draft):
    _, _, big, big_tok = pair
    big_model = transformers.AutoModelForCausalLM.from_pretrained(big).eval()
    alone = measure_speculative_decoding(big_model, big_tok, PROMPTS, max_new_tokens=24)
    assert alone["target_forwards"] >= alone["new_tokens"] > 0  # one forward per token without a draft
    assisted = measure_speculative_decoding(
        big_model,
        big_tok,
        PROMPTS,
        assistant=draft.model.eval(),
        max_new_tokens=24,
        num_assistant_tokens=4,
        baseline=alone["outputs"],
    )
    assert assisted["lossless"], assisted["mismatched_prompts"]
    assert assisted["outputs"] == alone["outputs"]
    assert 0.0 <= assisted["acceptance_rate"] <= 1.0
    assert assisted["draft_forwards"] > 0


@pytest.mark.slow
def test_the_big_model_as_its_own_draft_accepts_everything(pair):
    _, _, big, big_tok = pair
    big_model = transformers.AutoModelForCausalLM.from_pretrained(big).eval()
    twin = transformers.AutoModelForCausalLM.from_pretrained(big).eval()
    result = measure_speculative_decoding(
        big_model, big_tok, PROMPTS, assistant=twin, max_new_tokens=24, num_assistant_tokens=4
    )
    assert result["lossless"]
    assert result["acceptance_rate"] > 0.9
    assert result["tokens_per_forward"] > 2.5  # up to 4 accepted + 1 per big-model forward


def test_greedy_agreement_is_one_for_a_twin_and_tracks_acceptance(pair, draft):
    _, _, big, big_tok = pair
    big_model = transformers.AutoModelForCausalLM.from_pretrained(big).eval()
    twin = transformers.AutoModelForCausalLM.from_pretrained(big).eval()
    same = greedy_agreement(big_model, twin, big_tok, TEXTS[:4])
    assert same["agreement"] == 1.0 and same["expected_accepted_run"] == 8.0
    assert same["positions"] == sum(len(big_tok(t).input_ids) - 1 for t in TEXTS[:4])
    other = greedy_agreement(big_model, draft.model.eval(), big_tok, TEXTS[:4])
    assert 0.0 <= other["agreement"] < 1.0  # an untrained swapped tiny draft is not the big model
    with pytest.raises(DraftError):
        greedy_agreement(big_model, twin, big_tok, [""])


def test_expected_speedup_follows_the_closed_form():
    # a free draft that is always right turns k + 1 tokens into one big-model step
    assert expected_speedup(1.0, 4, 0.0) == pytest.approx(5.0)
    # a draft as slow as the big model never pays, whatever it proposes
    assert expected_speedup(0.9, 3, 1.0) < 1.0
    # Leviathan et al.'s example: a = 0.8, k = 3, c = 0.05 -> (1 - 0.8**4) / (0.2 * 1.15)
    assert expected_speedup(0.8, 3, 0.05) == pytest.approx((1 - 0.8**4) / (0.2 * 1.15))
    with pytest.raises(ValueError):
        expected_speedup(1.5, 3, 0.1)
    # verifying costs two one-token forwards: a free, perfect draft's two tokens per step gain nothing
    assert expected_speedup(1.0, 1, 0.0, verify_ratio=2.0) == pytest.approx(1.0)
    assert expected_speedup(0.8, 3, 0.05, verify_ratio=1.8) == pytest.approx((1 - 0.8**4) / (0.2 * (0.15 + 1.8)))
    with pytest.raises(ValueError):
        expected_speedup(0.5, 3, 0.1, verify_ratio=0.0)


def test_decode_step_seconds_is_a_positive_median(pair):
    _, _, big, big_tok = pair
    model = transformers.AutoModelForCausalLM.from_pretrained(big).eval()
    seconds = decode_step_seconds(model, big_tok, PROMPTS[0], steps=5, warmup=1)
    assert 0.0 < seconds < 5.0
    # a verification-sized forward (several new tokens at once) is measured the same way
    assert 0.0 < decode_step_seconds(model, big_tok, PROMPTS[0], steps=3, warmup=1, num_tokens=4) < 5.0
    with pytest.raises(ValueError):
        decode_step_seconds(model, big_tok, PROMPTS[0], num_tokens=0)


def test_a_draft_with_another_vocabulary_is_refused(pair):
    small, _, big, _ = pair
    with pytest.raises(DraftError, match="make_draft"):
        check_draft_compatible(
            transformers.AutoModelForCausalLM.from_pretrained(big),
            transformers.AutoModelForCausalLM.from_pretrained(small),
        )


def test_make_draft_refuses_a_vocabulary_size_override(pair):
    small, _, big, _ = pair
    with pytest.raises(DraftError, match="pad_to_multiple_of"):
        make_draft(str(small), str(big), pad_to_multiple_of=64)


@pytest.mark.slow
def test_cli_draft_swaps_distills_and_saves_a_plain_transformers_folder(pair, tmp_path):
    from tokswap import cli

    small, small_tok, big, big_tok = pair
    alignment = tmp_path / "alignment"
    _pieces_alignment(small_tok, big_tok).save_pretrained(alignment)
    dataset = tmp_path / "text.txt"
    dataset.write_text("\n\n".join(TEXTS[:16]))
    out = tmp_path / "draft"
    code = cli.main(
        [
            "draft",
            str(small),
            str(big),
            "--output",
            str(out),
            "--alignment",
            str(alignment),
            "--dataset",
            str(dataset),
            "--max-steps",
            "2",
            "--batch-size",
            "2",
            "--max-length",
            "32",
            "--logging-steps",
            "1",
            "--frequency-ranked",
            "30",
        ]
    )
    assert code == 0
    draft = transformers.AutoModelForCausalLM.from_pretrained(out)
    big_model = transformers.AutoModelForCausalLM.from_pretrained(big).eval()
    check_draft_compatible(big_model, draft)
    result = measure_speculative_decoding(
        big_model, big_tok, PROMPTS[:1], assistant=draft.eval(), max_new_tokens=12, num_assistant_tokens=3
    )
    assert result["lossless"]
    keep_ids = load_frequency_ranked_tokens(out)  # saved beside the draft, ranked on --dataset
    assert 30 <= len(keep_ids) <= 30 + len(big_tok.all_special_ids)
    with frequency_ranked_head(draft, keep_ids):
        trimmed = measure_speculative_decoding(
            big_model,
            big_tok,
            PROMPTS[:1],
            assistant=draft,
            max_new_tokens=12,
            num_assistant_tokens=3,
            baseline=result["outputs"],
        )
    assert trimmed["lossless"]


def test_cli_draft_without_text_is_a_one_line_user_error(pair, tmp_path, capsys):
    from tokswap import cli

    small, _, big, _ = pair
    assert cli.main(["draft", str(small), str(big), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dataset" in err[0]
    assert not (tmp_path / "out").exists()


def test_frequency_ranked_without_text_is_a_one_line_user_error(pair, tmp_path, capsys):
    from tokswap import cli

    small, _, big, _ = pair
    argv = ["draft", str(small), str(big), "--output", str(tmp_path / "out"), "--no-distill", "--frequency-ranked", "8"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--frequency-ranked" in err[0] and "--dataset" in err[0]
    assert not (tmp_path / "out").exists()
    with pytest.raises(DraftError):
        load_frequency_ranked_tokens(tmp_path)


def test_a_drafts_card_names_the_big_model_and_its_measurements(draft):
    from tokswap.hub.cards import render_model_card

    record = {
        **draft.swap_record,
        "draft_for": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        "speculative_decoding": {
            "code": {"acceptance_rate": 0.61, "tokens_per_forward": 2.4, "speedup": 1.35, "num_assistant_tokens": 4}
        },
    }
    card = str(render_model_card("me/smollm2-draft", {"architectures": ["LlamaForCausalLM"]}, record))
    assert "draft for [`Qwen/Qwen2.5-Coder-0.5B-Instruct`]" in card
    assert "assistant_model=draft" in card
    assert "| code | 4 | 61.0% | 2.40 | 1.35x |" in card
    plain = str(render_model_card("me/plain", {"architectures": ["LlamaForCausalLM"]}, {}))
    assert "Speculative decoding" not in plain


def test_frequency_ranked_head_scores_only_the_kept_tokens_and_restores_the_head(pair, draft):
    _, _, _, big_tok = pair
    model = draft.model.eval()
    keep_ids, coverage = rank_tokens_by_frequency(big_tok, TEXTS, keep=40)
    assert set(big_tok.all_special_ids) <= set(keep_ids.tolist()) and 40 <= len(keep_ids) <= 40 + len(
        big_tok.all_special_ids
    )
    assert 0.5 < coverage <= 1.0  # 40 of ~360 tokens cover most of a repetitive text
    ids = big_tok(TEXTS[0], return_tensors="pt").input_ids
    head = model.get_output_embeddings()
    with torch.inference_mode():
        full = model(ids).logits
        with frequency_ranked_head(model, keep_ids):
            trimmed = model(ids).logits
    assert model.get_output_embeddings() is head  # the draft's own (tied) head is back
    assert trimmed.shape == full.shape  # full vocabulary width: assisted generation compares ids as before
    torch.testing.assert_close(trimmed[..., keep_ids], full[..., keep_ids])
    dropped = torch.ones(full.shape[-1], dtype=torch.bool)
    dropped[keep_ids] = False
    assert torch.isneginf(trimmed[..., dropped]).all()
    with pytest.raises(DraftError):
        rank_tokens_by_frequency(big_tok, TEXTS, keep=0)
    with pytest.raises(DraftError):
        with frequency_ranked_head(model, torch.tensor([full.shape[-1]])):
            pass


@pytest.mark.slow
@pytest.mark.parametrize(
    "speedups",
    [
        ("frequency_ranked_head",),
        ("small_batch_matmul",),
        ("bfloat16_draft",),
        ("frequency_ranked_head", "small_batch_matmul", "bfloat16_draft"),
    ],
)
def test_draft_speedups_keep_assisted_generation_lossless(pair, draft, speedups):
    _, _, big, big_tok = pair
    big_model = transformers.AutoModelForCausalLM.from_pretrained(big).eval()
    keep_ids, _ = rank_tokens_by_frequency(big_tok, TEXTS, keep=20)
    assistant = draft.model.eval()
    if "bfloat16_draft" in speedups:  # a float32 big model verifies a bfloat16 draft
        assistant = copy.deepcopy(assistant).to(torch.bfloat16)
    with contextlib.ExitStack() as stack:
        if "frequency_ranked_head" in speedups:
            stack.enter_context(frequency_ranked_head(assistant, keep_ids))
        if "small_batch_matmul" in speedups:
            stack.enter_context(small_batch_matmul(big_model, assistant))
        alone = measure_speculative_decoding(big_model, big_tok, PROMPTS, max_new_tokens=24)  # run the same way
        assisted = measure_speculative_decoding(
            big_model,
            big_tok,
            PROMPTS,
            assistant=assistant,
            max_new_tokens=24,
            num_assistant_tokens=4,
            baseline=alone["outputs"],
        )
    assert assisted["lossless"], assisted["mismatched_prompts"]
    assert assisted["draft_forwards"] > 0
    assert not any("forward" in vars(m) for m in [*big_model.modules(), *assistant.modules()])  # all restored


def test_small_batch_matmul_matches_linear_for_few_rows_and_restores_the_layers():
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 48)
    keep_ids = torch.tensor([0, 5, 9])
    with torch.inference_mode():
        for rows in (1, 2, 3, 8, 9):
            x = torch.randn(1, rows, 64)
            expected = layer(x)
            with small_batch_matmul(layer):
                assert "forward" in vars(layer)
                got = layer(x)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert "forward" not in vars(layer)  # the class's own forward is back
        # a frequency-ranked head: kept columns equal the plain head's, the rest stay -inf
        head = torch.nn.Linear(64, 12, bias=False)
        from tokswap.drafting import FrequencyRankedHead

        frequency_ranked = FrequencyRankedHead(head, keep_ids, 12)
        x = torch.randn(1, 3, 64)
        with small_batch_matmul(frequency_ranked):
            logits = frequency_ranked(x)
        torch.testing.assert_close(logits[..., keep_ids], head(x)[..., keep_ids], rtol=1e-5, atol=1e-5)
        assert torch.isneginf(logits[..., [1, 2, 3]]).all()
    # training keeps the usual path: gradients flow as before
    x = torch.randn(2, 64, requires_grad=True)
    with small_batch_matmul(layer):
        layer(x).sum().backward()
    assert x.grad is not None and layer.weight.grad is not None
    with pytest.raises(DraftError):
        with small_batch_matmul(layer, max_rows=0):
            pass
