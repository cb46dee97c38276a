"""TRL's telemetry ping from tokswap's trainers: off unless TOKSWAP_TELEMETRY=1, never to a private HF_ENDPOINT."""

import copy

import pytest
import trl.trainer.base_trainer as base_trainer
from datasets import Dataset
from tokenizers import ByteLevelBPETokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from tokswap.distillation import TokenDistillationConfig, TokenDistillationTrainer
from tokswap.telemetry import endpoint_is_public_hub
from tokswap.training import VocabAdaptationConfig, stage_trainer_class

TEXTS = [f"Line {i}: a short sentence about the number {i}." for i in range(16)]


@pytest.fixture()
def pings(monkeypatch):
    sent = []
    monkeypatch.setattr(base_trainer, "send_telemetry", lambda **kwargs: sent.append(kwargs["topic"]))
    monkeypatch.delenv("CI", raising=False)  # TRL skips CI runs; these tests need the ping path itself
    monkeypatch.delenv("TOKSWAP_TELEMETRY", raising=False)
    return sent


@pytest.fixture(scope="module")
def tiny():
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXTS, vocab_size=280, min_frequency=1, special_tokens=["<s>", "</s>"], show_progress=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=288,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    return model, tokenizer


def set_endpoint(monkeypatch, url):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", url)


@pytest.mark.parametrize(
    "url, public",
    [
        ("https://huggingface.co", True),
        ("https://hf.co", True),
        ("http://127.0.0.1:8080", False),
        ("https://hub.example.com", False),
        ("https://huggingface.co.evil.example", False),
    ],
)
def test_endpoint_is_public_hub(monkeypatch, url, public):
    set_endpoint(monkeypatch, url)
    assert endpoint_is_public_hub() is public


def build_trainers(tiny, tmp_path):
    model, tokenizer = tiny
    data = Dataset.from_dict({"text": TEXTS})
    stage = stage_trainer_class()(
        model=copy.deepcopy(model),
        processing_class=copy.deepcopy(tokenizer),
        args=VocabAdaptationConfig(output_dir=str(tmp_path / "ce"), max_length=16, report_to="none").to_sft_config(1),
        train_dataset=data,
    )
    distill = TokenDistillationTrainer(
        model=copy.deepcopy(model),
        teacher_model=copy.deepcopy(model),
        processing_class=copy.deepcopy(tokenizer),
        train_dataset=data,
        args=TokenDistillationConfig(output_dir=str(tmp_path / "kd"), max_length=16, report_to="none"),
    )
    return stage, distill


def test_no_ping_unless_the_user_turns_it_on(monkeypatch, pings, tiny, tmp_path):
    set_endpoint(monkeypatch, "https://huggingface.co")
    build_trainers(tiny, tmp_path)
    assert pings == []


def test_no_ping_to_a_private_endpoint_even_when_turned_on(monkeypatch, pings, tiny, tmp_path):
    monkeypatch.setenv("TOKSWAP_TELEMETRY", "1")
    set_endpoint(monkeypatch, "http://127.0.0.1:9")
    build_trainers(tiny, tmp_path)
    assert pings == []


def test_turned_on_the_public_hub_gets_trl_s_usual_ping(monkeypatch, pings, tiny, tmp_path):
    monkeypatch.setenv("TOKSWAP_TELEMETRY", "1")
    set_endpoint(monkeypatch, "https://huggingface.co")
    build_trainers(tiny, tmp_path)
    assert len(pings) == 2 and all(topic.startswith("trl/") for topic in pings)
