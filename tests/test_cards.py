"""Model cards: templates ship with the package, metadata is what the Hub reads, prose says what a reader needs."""

import json

import numpy as np
import pytest
from huggingface_hub import ModelCard

from tokswap.alignment import RowSource, TokenAlignment
from tokswap.hub import cards

pytestmark = pytest.mark.usefixtures("hub")  # talks to the loopback Hub

SOURCE_FP = {"name_or_path": "HuggingFaceTB/SmolLM2-135M", "vocab_size": 49152, "vocab_hash": "a" * 64}
TARGET_FP = {"name_or_path": "Qwen/Qwen2.5-0.5B", "vocab_size": 151665, "vocab_hash": "b" * 64}


def make_alignment(metrics=None):
    rows = np.array([RowSource.IDENTICAL] * 6 + [RowSource.GLOVE] * 3 + [RowSource.FALLBACK], dtype=np.int8)
    return TokenAlignment(
        target_to_source=np.arange(10),
        row_sources=rows,
        config={
            "source_tokenizer": dict(SOURCE_FP),
            "target_tokenizer": dict(TARGET_FP),
            "metrics": metrics
            if metrics is not None
            else {"bleu1": 0.6123, "coverage": 0.93, "semantic_similarity": 0.81},
            "corpus": {"name": "mixed", "bytes": 1_000_000},
            "hyperparameters": {"dim": 300, "window": 15},
        },
    )


def test_templates_ship_inside_the_package():
    folder = cards.hub_cards_dir()
    for name in (cards.MODEL_CARD_TEMPLATE, cards.ALIGNMENT_CARD_TEMPLATE):
        text = (folder / name).read_text(encoding="utf-8")
        assert text.startswith("---\n{{ card_data }}\n---"), name


def test_alignment_card_records_hashes_checksum_and_metrics():
    card = cards.render_alignment_card(
        make_alignment(), repo_id="ns/smollm2-135m_to_qwen2.5-0.5b", alignment_sha256="c" * 64
    )
    reparsed = ModelCard(str(card))  # what a reader of README.md gets
    meta = reparsed.data.to_dict()
    assert meta["library_name"] == "tokswap"
    assert "tokalign" in meta["tags"]
    assert meta["tokswap"]["source_vocab_hash"] == "a" * 64
    assert meta["tokswap"]["target_vocab_hash"] == "b" * 64
    assert meta["tokswap"]["alignment_sha256"] == "c" * 64
    text = reparsed.text
    assert "| BLEU-1 | 0.6123 |" in text
    assert "| coverage | 0.93 |" in text
    assert "| identical | 6 |" in text and "| glove | 3 |" in text
    assert 'TokenAlignment.from_pretrained("ns/smollm2-135m_to_qwen2.5-0.5b")' in text
    assert "ok{A}lign: Efficient Vocabulary Adaptation via Token Alignment" in text


def test_alignment_card_without_metrics_says_so():
    card = cards.render_alignment_card(make_alignment(metrics={}), repo_id="ns/x")
    assert "No quality figures were recorded" in card.text


def write_model_folder(folder, swap_record=None, hub=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 151936})
    )
    tokswap_config = {
        "source_model_id": "HuggingFaceTB/SmolLM2-135M",
        "source_tokenizer": "HuggingFaceTB/SmolLM2-135M",
        "target_tokenizer": "Qwen/Qwen2.5-0.5B",
        "init_method": "tokalign",
    }
    if swap_record is not None:
        tokswap_config["swap_record"] = swap_record
    (folder / "tokswap_config.json").write_text(json.dumps(tokswap_config))
    make_alignment().save_pretrained(folder / "alignment")
    return folder


def test_model_card_metadata_and_prose(tmp_path):
    record = {
        "training": {
            "stages": [
                {"stage": 1, "steps": 500, "learning_rate": 6.4e-4},
                {"stage": 2, "steps": 1000, "learning_rate": 5e-5},
            ],
            "tokens": 65_536_000,
        },
        "evaluation": {
            "source model": {"bits_per_byte": 0.91, "bytes_per_token": 4.1},
            "after swap": {"bits_per_byte": 1.42, "bytes_per_token": 4.6},
            "after training": {"bits_per_byte": 0.97, "bytes_per_token": 4.6},
        },
        "datasets": ["HuggingFaceFW/fineweb-edu"],
    }
    folder = write_model_folder(tmp_path / "m", swap_record=record)
    source_card = {"license": "apache-2.0", "language": ["en"], "datasets": ["HuggingFaceTB/smollm-corpus"]}
    card = ModelCard(str(cards.render_model_card_from_folder(folder, "me/smollm2-qwen", source_card=source_card)))
    meta = card.data.to_dict()
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M"
    assert meta["base_model_relation"] == "finetune"
    assert meta["library_name"] == "transformers"
    assert meta["license"] == "apache-2.0"  # carried from the source model's card
    assert meta["language"] == ["en"]
    assert meta["datasets"] == ["HuggingFaceFW/fineweb-edu"]  # what it was trained on wins
    assert set(cards.CARD_TAGS) <= set(meta["tags"])
    text = card.text
    assert "`HuggingFaceTB/SmolLM2-135M` with its tokenizer replaced by **`Qwen/Qwen2.5-0.5B`**" in text
    assert "| initialization of new rows | `tokalign`" in text
    assert "| BLEU-1 | 0.6123 |" in text
    assert "training stage 1: stage=1, steps=500, learning_rate=0.00064" in text
    assert "| bits per byte | 0.91 | 1.42 | 0.97 |" in text
    assert "| measure | source model | after swap | after training |" in text
    assert 'AutoModelForCausalLM.from_pretrained("me/smollm2-qwen")' in text
    assert "@inproceedings{li-etal-2025-tokalign" in text


def test_model_card_for_an_untrained_local_model(tmp_path):
    folder = write_model_folder(tmp_path / "m")
    config = json.loads((folder / "tokswap_config.json").read_text())
    config["source_model_id"] = str(tmp_path / "local-model")  # a local path is no Hub base_model
    (folder / "tokswap_config.json").write_text(json.dumps(config))
    card = ModelCard(str(cards.render_model_card_from_folder(folder, "me/x")))
    meta = card.data.to_dict()
    assert "base_model" not in meta and "base_model_relation" not in meta
    assert "not trained after the swap" in card.text
    assert "No evaluation was recorded" in card.text


@pytest.mark.parametrize("value,expected", [(0.123456, "0.1235"), (1234567, "1,234,567"), (True, "yes")])
def test_number_formatting(value, expected):
    assert cards._fmt(value) == expected


def test_model_card_from_the_swappers_record(tmp_path):
    """`tokswap_config.json` as `TokenizerSwapper.save_pretrained` writes it: the record at top level."""
    folder = write_model_folder(tmp_path / "m")
    record = {
        "source_model": "HuggingFaceTB/SmolLM2-135M",
        "source_tokenizer": dict(SOURCE_FP),
        "target_tokenizer": dict(TARGET_FP, name_or_path="/cache/qwen"),
        "target_tokenizer_id": "Qwen/Qwen2.5-0.5B",
        "init_method": "tokalign",
        "new_word_fit": {"num_words": 24158, "loss_before": 0.66, "loss_after": 0.26},
        "output_row_fit": {"rows_fitted": 1875, "heldout_nll_before": 5.63, "heldout_nll_after": 5.15},
        "kept_source_words": {"words": 6186, "intermediate_tokens": 464, "unreached": 0},
        "num_parameters": 134_515_008,
        "alignment": {
            "origin": "prebuilt",
            "repo_id": "tokswap-alignments/smollm2_to_qwen2.5",
            "revision": "f" * 40,
            "metrics": {"bleu1": 0.5},
            "row_source_counts": {"identical": 5},
        },
        "training": [
            {
                "kind": "adapt_vocabulary",
                "config": {
                    "stage1_max_steps": 100,
                    "stage1_learning_rate": 6.4e-4,
                    "stage2": "full",
                    "stage2_max_steps": 200,
                    "stage2_learning_rate": 5e-5,
                    "merge_original_weight": 0.25,
                    "lora_r": 64,
                    "output_dir": "x",
                    "report_to": "none",
                },
            },
            {
                "kind": "distill",
                "config": {"merge_original_weight": 0.0, "max_steps": 50, "temperature": 1.0},
                "teacher": "Qwen/Qwen2.5-0.5B",
            },
        ],
    }
    (folder / "tokswap_config.json").write_text(json.dumps(record))
    card = ModelCard(str(cards.render_model_card_from_folder(folder, "me/x")))
    meta = card.data.to_dict()
    assert "| new words' input rows | fitted to the source model's hidden states (24,158 words" in card.text
    assert "| new tokens' output rows | fitted by likelihood of text (1,875 rows; embeddings untied) |" in card.text
    assert "| kept source words | 6,186 whole words of the source vocabulary" in card.text
    assert "the vocabulary extends `Qwen/Qwen2.5-0.5B`'s |" in card.text
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M"
    assert meta["tokswap"]["target_tokenizer"] == "Qwen/Qwen2.5-0.5B"
    assert meta["tokswap"]["alignment_repo"] == "tokswap-alignments/smollm2_to_qwen2.5"
    text = card.text
    assert "134.5M parameters" in text
    assert "two-stage vocabulary adaptation: stage1_max_steps=100, stage1_learning_rate=0.00064, stage2=full" in text
    assert "stage2_learning_rate=5e-05, merge_original_weight=0.25" in text
    assert "lora_r" not in text and "output_dir" not in text
    assert "token-level distillation from teacher `Qwen/Qwen2.5-0.5B`: max_steps=50, temperature=1" in text
    assert "tokswap-alignments/smollm2_to_qwen2.5" in text


def test_asset_names_become_hub_base_models(tmp_path):
    folder = write_model_folder(tmp_path / "m")
    config = json.loads((folder / "tokswap_config.json").read_text())
    config["source_model_id"] = "smollm2-135m"  # a tokswap asset name
    (folder / "tokswap_config.json").write_text(json.dumps(config))
    meta = ModelCard(str(cards.render_model_card_from_folder(folder, "me/x"))).data.to_dict()
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
