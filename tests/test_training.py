"""Two-stage vocabulary adaptation on TRL (tiny models built from configs, CPU, fp32)."""

import copy
import json

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("peft")

from datasets import Dataset  # noqa: E402
from tokenizers import ByteLevelBPETokenizer  # noqa: E402
from transformers import (  # noqa: E402
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    TrainerCallback,
)

from tokswap.training import (  # noqa: E402
    TrainingError,
    VocabAdaptationConfig,
    adapt_vocabulary,
    align_special_token_ids,
    embedding_module_names,
    embedding_parameters,
    embeddings_are_tied,
    latest_checkpoint,
    load_training_dataset,
    never_shrink_vocabulary,
    pick_attn_implementation,
)

PADDED_VOCAB = 320  # larger than the tokenizer: the padding rows must survive training

TEXTS = [
    f"Document {i}: the quick brown fox number {i} jumps over {i * 7} lazy dogs, then rests by the river. "
    f"Tokenizers split text into pieces; models learn their embeddings. Line {i % 5} ends here."
    for i in range(48)
]


@pytest.fixture(scope="module")
def tokenizer():
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXTS, vocab_size=300, min_frequency=1, special_tokens=["<s>", "</s>"], show_progress=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")
    assert len(tok) < PADDED_VOCAB
    return tok


@pytest.fixture()
def fresh_tokenizer(tokenizer):
    return copy.deepcopy(tokenizer)


@pytest.fixture(scope="module")
def text_dataset():
    return Dataset.from_dict({"text": TEXTS})


def make_model(arch: str):
    torch.manual_seed(0)
    if arch == "llama-untied":
        config = LlamaConfig(
            vocab_size=PADDED_VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=False,
            bos_token_id=7,
            eos_token_id=8,
        )
        return LlamaForCausalLM(config)
    if arch == "llama-tied":
        config = LlamaConfig(
            vocab_size=PADDED_VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=True,
        )
        return LlamaForCausalLM(config)
    if arch == "gpt-neox":
        config = GPTNeoXConfig(
            vocab_size=PADDED_VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            tie_word_embeddings=False,
        )
        return GPTNeoXForCausalLM(config)
    raise ValueError(arch)


def tiny_config(tmp_path, **overrides) -> VocabAdaptationConfig:
    kwargs = dict(
        output_dir=str(tmp_path / "run"),
        stage1_max_steps=3,
        stage2_max_steps=0,
        # large rates so that three steps visibly move every trained weight
        stage1_learning_rate=1e-2,
        stage2_learning_rate=1e-2,
        max_length=32,
        per_device_train_batch_size=2,
        logging_steps=1,
        save_steps=100,
        save_final_model=False,
        warmup_ratio=0.0,
    )
    kwargs.update(overrides)
    return VocabAdaptationConfig(**kwargs)


def snapshot(model) -> dict:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def changed_parameters(model, before: dict) -> set:
    return {name for name, param in model.named_parameters() if not torch.equal(param.detach(), before[name])}


def embedding_names(model) -> set:
    ids = {id(p) for p in embedding_parameters(model)}
    return {name for name, param in model.named_parameters() if id(param) in ids}


@pytest.mark.parametrize("arch", ["llama-untied", "llama-tied", "gpt-neox"])
def test_stage1_changes_only_embeddings_and_head(arch, fresh_tokenizer, text_dataset, tmp_path):
    model = make_model(arch)
    before = snapshot(model)
    expected = embedding_names(model)
    if arch == "llama-untied":
        assert {"model.embed_tokens.weight", "lm_head.weight"} <= expected
    if arch == "llama-tied":
        assert embeddings_are_tied(model) and len(embedding_parameters(model)) == 1

    result = adapt_vocabulary(model, fresh_tokenizer, text_dataset, tiny_config(tmp_path))

    assert result.global_steps == {1: 3}
    assert changed_parameters(result.model, before) == expected
    # the padded vocabulary survives
    assert result.model.config.vocab_size == PADDED_VOCAB
    assert result.model.get_input_embeddings().weight.shape[0] == PADDED_VOCAB
    assert result.model.get_output_embeddings().weight.shape[0] == PADDED_VOCAB
    if arch == "llama-tied":
        assert embeddings_are_tied(result.model)
    assert [e["loss"] for e in result.stage1_log_history if "loss" in e]
    # TRL's fused-head patch is gone: the model is a plain model again
    assert "forward" not in result.model.__dict__


@pytest.mark.slow
def test_stage2_full_trains_the_body(fresh_tokenizer, text_dataset, tmp_path):
    model = make_model("llama-untied")
    before = snapshot(model)
    config = tiny_config(tmp_path, stage1_max_steps=2, stage2_max_steps=2)
    result = adapt_vocabulary(model, fresh_tokenizer, text_dataset, config)
    assert result.global_steps == {1: 2, 2: 2}
    changed = changed_parameters(result.model, before)
    body = set(before) - embedding_names(result.model)
    assert changed & body, "stage 2 must change non-embedding weights"
    assert "model.layers.0.self_attn.q_proj.weight" in changed
    assert all(p.requires_grad for p in result.model.parameters())


@pytest.mark.slow
def test_merge_original_moves_the_trained_body_back(fresh_tokenizer, text_dataset, tmp_path):
    original = make_model("llama-untied")
    steps = dict(stage1_max_steps=2, stage2_max_steps=2)
    trained = adapt_vocabulary(
        make_model("llama-untied"), fresh_tokenizer, text_dataset, tiny_config(tmp_path, **steps)
    )
    merged = adapt_vocabulary(
        make_model("llama-untied"),
        copy.deepcopy(fresh_tokenizer),
        text_dataset,
        tiny_config(tmp_path / "merged", merge_original_weight=0.25, **steps),
        teacher_model=original,
    )
    embeddings = embedding_names(merged.model)
    reference, trained_weights = dict(original.named_parameters()), dict(trained.model.named_parameters())
    for name, weight in merged.model.named_parameters():
        if name in embeddings:  # kept as trained
            torch.testing.assert_close(weight, trained_weights[name])
        else:
            expected = 0.75 * trained_weights[name] + 0.25 * reference[name]
            torch.testing.assert_close(weight, expected, rtol=1e-5, atol=1e-6)
    assert "model.layers.0.self_attn.q_proj.weight" in changed_parameters(trained.model, snapshot(original))
    assert all(p.requires_grad for p in merged.model.parameters())


def test_merge_original_needs_the_original_model(fresh_tokenizer, text_dataset, tmp_path):
    config = tiny_config(tmp_path, merge_original_weight=0.5)
    with pytest.raises(TrainingError, match="needs the model before the swap: pass teacher_model="):
        adapt_vocabulary(make_model("llama-untied"), fresh_tokenizer, text_dataset, config)
    with pytest.raises(TrainingError, match="keep merge_adapters=True"):
        VocabAdaptationConfig(merge_original_weight=0.5, stage2="lora", merge_adapters=False)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama-tied", "gpt-neox"])
def test_stage2_lora_trains_embeddings_and_merges(arch, fresh_tokenizer, text_dataset, tmp_path):
    model = make_model(arch)
    names = embedding_module_names(model)
    if arch == "gpt-neox":
        assert names == ["gpt_neox.embed_in", "lm_head"]
    before = snapshot(model)
    config = tiny_config(tmp_path, stage1_max_steps=1, stage2_max_steps=3, stage2="lora", lora_r=4, lora_alpha=8)
    result = adapt_vocabulary(model, fresh_tokenizer, text_dataset, config)
    merged = result.model
    assert type(merged) is type(model)  # a plain transformers model after merging
    assert not any("lora" in name for name, _ in merged.named_parameters())
    changed = changed_parameters(merged, before)
    assert embedding_names(merged) <= changed
    assert any(".layers." in name and name.endswith("weight") for name in changed), "LoRA merge must change the body"
    if arch == "llama-tied":
        assert embeddings_are_tied(merged)
    assert merged.get_input_embeddings().weight.shape[0] == PADDED_VOCAB


@pytest.mark.slow
def test_stage2_lora_without_merge_returns_peft_model(fresh_tokenizer, text_dataset, tmp_path):
    from peft import PeftModel

    model = make_model("llama-untied")
    config = tiny_config(
        tmp_path, stage1_max_steps=0, stage2_max_steps=2, stage2="lora", lora_r=4, merge_adapters=False
    )
    result = adapt_vocabulary(model, fresh_tokenizer, text_dataset, config)
    assert isinstance(result.model, PeftModel)
    assert 1 not in result.global_steps
    trainable = {n for n, p in result.model.named_parameters() if p.requires_grad}
    assert any("modules_to_save" in n and "lm_head" in n for n in trainable)
    assert any("modules_to_save" in n and "embed_tokens" in n for n in trainable)


class _StopAt(TrainerCallback):
    """Simulates an interrupted run: stop after `step` optimizer steps (a checkpoint was saved there)."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True
        return control


@pytest.mark.slow
def test_resume_continues_global_step(fresh_tokenizer, text_dataset, tmp_path):
    config = tiny_config(tmp_path, stage1_max_steps=4, save_steps=2)
    first = adapt_vocabulary(make_model("llama-untied"), fresh_tokenizer, text_dataset, config, callbacks=[_StopAt(2)])
    assert first.global_steps == {1: 2}
    assert latest_checkpoint(config.stage_output_dir(1)).endswith("checkpoint-2")

    resumed_config = tiny_config(tmp_path, stage1_max_steps=4, save_steps=2, resume_from_checkpoint=True)
    second = adapt_vocabulary(make_model("llama-untied"), fresh_tokenizer, text_dataset, resumed_config)
    assert second.global_steps == {1: 4}
    logged_steps = [e["step"] for e in second.stage1_log_history if "loss" in e]
    assert logged_steps == [1, 2, 3, 4]  # the history of the first run is restored and continued
    assert latest_checkpoint(config.stage_output_dir(1)).endswith("checkpoint-4")
    # resumed weights are the checkpoint's, not the fresh model's
    fresh = make_model("llama-untied")
    assert not torch.equal(fresh.lm_head.weight, second.model.lm_head.weight)


@pytest.mark.slow
def test_resume_from_stage2_checkpoint_skips_stage1(fresh_tokenizer, text_dataset, tmp_path):
    config = tiny_config(tmp_path, stage1_max_steps=1, stage2_max_steps=2, save_steps=1)
    adapt_vocabulary(make_model("llama-untied"), fresh_tokenizer, text_dataset, config)
    ckpt = latest_checkpoint(config.stage_output_dir(2))
    assert ckpt.endswith("checkpoint-2")
    resumed = tiny_config(tmp_path, stage1_max_steps=1, stage2_max_steps=3, save_steps=1, resume_from_checkpoint=ckpt)
    result = adapt_vocabulary(make_model("llama-untied"), fresh_tokenizer, text_dataset, resumed)
    assert 1 not in result.global_steps and result.global_steps[2] == 3
    assert result.stage1_log_history  # read back from stage1/trainer_state.json

    with pytest.raises(TrainingError, match="which stage"):
        adapt_vocabulary(
            make_model("llama-untied"),
            fresh_tokenizer,
            text_dataset,
            tiny_config(tmp_path, resume_from_checkpoint=str(tmp_path)),
        )


def _fake_checkpoint(folder, step, state=True, weights=True):
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if weights:
        (path / "model.safetensors").write_bytes(b"weights")
    if state:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def test_resume_with_nothing_to_resume_is_an_error(tmp_path):
    from tokswap.distillation import DistillationError
    from tokswap.self_distillation import SelfDistillationError
    from tokswap.training import _plan_resume, resolve_resume_checkpoint

    with pytest.raises(TrainingError, match="nothing to resume.*Drop --resume"):
        _plan_resume(tiny_config(tmp_path, resume_from_checkpoint=True))
    with pytest.raises(TrainingError, match="nothing to resume"):
        _plan_resume(tiny_config(tmp_path, resume_from_checkpoint="true"))
    with pytest.raises(DistillationError, match="nothing to resume"):
        resolve_resume_checkpoint(True, tmp_path / "distill", DistillationError)
    with pytest.raises(SelfDistillationError, match="nothing to resume"):
        resolve_resume_checkpoint(True, tmp_path / "self-distill", SelfDistillationError)
    # only incomplete checkpoints: still nothing to resume
    _fake_checkpoint(tmp_path / "distill", 3, state=False)
    with pytest.raises(DistillationError, match="nothing to resume"):
        resolve_resume_checkpoint(True, tmp_path / "distill", DistillationError)
    assert resolve_resume_checkpoint(None, tmp_path / "distill") is None


def test_incomplete_checkpoints_are_skipped_for_the_newest_complete_one(tmp_path, caplog):
    import logging

    from tokswap.training import _plan_resume, checkpoint_problem, resolve_resume_checkpoint

    stage1 = tmp_path / "run" / "stage1"
    good = _fake_checkpoint(stage1, 2)
    no_state = _fake_checkpoint(stage1, 4, state=False)
    no_weights = _fake_checkpoint(stage1, 6, weights=False)
    torn = _fake_checkpoint(stage1, 8)
    (torn / "trainer_state.json").write_text('{"global_step": 8, "log_hi')  # killed while writing it
    assert checkpoint_problem(good) is None
    assert "trainer_state.json" in checkpoint_problem(no_state)
    assert "weights" in checkpoint_problem(no_weights)
    assert "unreadable" in checkpoint_problem(torn)

    library_logger = logging.getLogger("tokswap")
    library_logger.addHandler(caplog.handler)
    try:
        assert latest_checkpoint(stage1) == str(good)
    finally:
        library_logger.removeHandler(caplog.handler)
    assert caplog.text.count("Skipping the incomplete checkpoint") == 3
    assert _plan_resume(tiny_config(tmp_path, resume_from_checkpoint=True)) == (str(good), None)
    assert resolve_resume_checkpoint(True, stage1) == str(good)
    # an incomplete checkpoint named explicitly is refused, not used
    with pytest.raises(TrainingError, match="incomplete"):
        _plan_resume(tiny_config(tmp_path, resume_from_checkpoint=str(no_state)))
    with pytest.raises(TrainingError, match="incomplete"):
        resolve_resume_checkpoint(str(torn), stage1)
    # a sharded checkpoint counts only with all its shards
    sharded = _fake_checkpoint(tmp_path / "sharded", 1, weights=False)
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})
    )
    (sharded / "s1.safetensors").write_bytes(b"x")
    assert checkpoint_problem(sharded) == "no model weights"
    (sharded / "s2.safetensors").write_bytes(b"x")
    assert checkpoint_problem(sharded) is None


@pytest.mark.slow
def test_special_token_rewrite_by_trl_is_a_noop(fresh_tokenizer, text_dataset, tmp_path):
    from transformers.trainer_utils import align_special_tokens
    from trl import SFTTrainer

    model = make_model("llama-untied")  # config says bos=7, eos=8; the tokenizer says 0 and 1, no pad
    assert model.config.bos_token_id != fresh_tokenizer.bos_token_id
    changed = align_special_token_ids(model, fresh_tokenizer)
    assert "config.bos_token_id" in changed and "config.pad_token_id" in changed
    assert fresh_tokenizer.pad_token == fresh_tokenizer.eos_token

    names = ("bos_token_id", "eos_token_id", "pad_token_id")

    def ids():
        return {
            (where, name): getattr(obj, name)
            for where, obj in (("config", model.config), ("generation", model.generation_config))
            for name in names
        }

    aligned = copy.deepcopy(ids())
    assert model.config.bos_token_id == fresh_tokenizer.bos_token_id
    assert model.config.eos_token_id == fresh_tokenizer.eos_token_id
    assert model.config.pad_token_id == fresh_tokenizer.pad_token_id
    assert fresh_tokenizer.eos_token_id in model.generation_config.eos_token_id

    # what transformers' Trainer does at train() time, and what SFTTrainer does in __init__: nothing to change
    align_special_tokens(model, fresh_tokenizer)
    assert ids() == aligned
    trainer = SFTTrainer(
        model=model,
        args=tiny_config(tmp_path).to_sft_config(1),
        train_dataset=text_dataset,
        processing_class=fresh_tokenizer,
    )
    trainer.train()
    assert ids() == aligned
    assert align_special_token_ids(model, fresh_tokenizer) == {}


def test_padded_vocabulary_is_never_shrunk(fresh_tokenizer):
    model = make_model("llama-untied")
    with never_shrink_vocabulary(model):
        model.resize_token_embeddings(len(fresh_tokenizer))  # what a "fix the mismatch" helper would do
        assert model.get_input_embeddings().weight.shape[0] == PADDED_VOCAB
        model.resize_token_embeddings(PADDED_VOCAB + 8)  # growing is allowed
    assert model.config.vocab_size == PADDED_VOCAB + 8
    assert model.lm_head.weight.shape[0] == PADDED_VOCAB + 8
    assert "resize_token_embeddings" not in model.__dict__
    model.resize_token_embeddings(len(fresh_tokenizer))  # outside the guard it behaves as usual
    assert model.config.vocab_size == len(fresh_tokenizer)


def test_pretokenized_dataset(fresh_tokenizer, tmp_path):
    ids = [fresh_tokenizer(text)["input_ids"] for text in TEXTS]
    dataset = Dataset.from_dict({"input_ids": ids})
    model = make_model("gpt-neox")
    before = snapshot(model)
    result = adapt_vocabulary(model, fresh_tokenizer, dataset, tiny_config(tmp_path, stage1_max_steps=2))
    assert changed_parameters(result.model, before) == embedding_names(result.model)


def test_default_recovery_self_distills_from_the_original_on_text_only(fresh_tokenizer, text_dataset, tmp_path):
    """recovery='auto' (the default): self-distillation when the original model, its tokenizer and raw text are
    given; plain cross-entropy on pre-tokenized data or without the original's tokenizer."""
    assert VocabAdaptationConfig().recovery == "auto"
    original = make_model("gpt-neox")
    config = tiny_config(tmp_path, stage1_max_steps=1)
    result = adapt_vocabulary(
        make_model("gpt-neox"),
        fresh_tokenizer,
        text_dataset,
        config,
        teacher_model=original,
        teacher_tokenizer=copy.deepcopy(fresh_tokenizer),
    )
    logged = [entry for entry in result.stage1_log_history if "loss" in entry]
    assert logged and all("prediction_loss" in entry and "ce_loss" in entry for entry in logged)
    ids = Dataset.from_dict({"input_ids": [fresh_tokenizer(text)["input_ids"] for text in TEXTS]})
    for dataset, tokenizer in ((ids, copy.deepcopy(fresh_tokenizer)), (text_dataset, None)):
        result = adapt_vocabulary(
            make_model("gpt-neox"),
            fresh_tokenizer,
            dataset,
            tiny_config(tmp_path / "ce", stage1_max_steps=1),
            teacher_model=original,
            teacher_tokenizer=tokenizer,
        )
        logged = [entry for entry in result.stage1_log_history if "loss" in entry]
        assert logged and not any("ce_loss" in entry for entry in logged)


def test_bad_dataset_is_refused(fresh_tokenizer, tmp_path):
    with pytest.raises(TrainingError, match="'text' column"):
        adapt_vocabulary(
            make_model("gpt-neox"), fresh_tokenizer, Dataset.from_dict({"body": ["x"]}), tiny_config(tmp_path)
        )


def test_config_budgets_and_defaults(tmp_path):
    config = VocabAdaptationConfig(
        output_dir=str(tmp_path), stage1_tokens=1000, stage2_max_steps=5, per_device_train_batch_size=2, max_length=32
    )
    assert config.tokens_per_step() == 64
    assert config.stage_max_steps(1) == 16  # ceil(1000 / 64)
    assert config.stage_max_steps(2) == 5
    assert VocabAdaptationConfig().stage_max_steps(1) is None
    sft1, sft2 = config.to_sft_config(1), config.to_sft_config(2)
    assert sft1.learning_rate == pytest.approx(6.4e-4) and sft2.learning_rate == pytest.approx(2e-4)
    assert sft1.max_steps == 16 and sft1.packing and sft1.lr_scheduler_type.value == "cosine"
    assert sft1.weight_decay == pytest.approx(0.01) and sft1.max_grad_norm == 1.0
    assert sft1.warmup_steps == pytest.approx(0.03)
    assert sft1.bf16 is False  # no CUDA here: TRL's own default (True) would raise on CPU
    assert sft1.output_dir.endswith("stage1") and sft2.output_dir.endswith("stage2")
    override = VocabAdaptationConfig(output_dir=str(tmp_path), sft_kwargs={"logging_steps": 3})
    assert override.to_sft_config(1).logging_steps == 3
    with pytest.raises(TrainingError):
        VocabAdaptationConfig(stage2="partial")
    if not torch.cuda.is_available():
        with pytest.raises(TrainingError, match="bf16"):
            VocabAdaptationConfig(bf16=True)


def test_pick_attn_implementation_on_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_attn_implementation() == "sdpa"


def test_load_training_dataset_formats(tmp_path):
    (tmp_path / "a.txt").write_text("first paragraph\nstill first\n\nsecond paragraph\n")
    assert load_training_dataset(tmp_path / "a.txt").num_rows == 2
    with open(tmp_path / "b.jsonl", "w") as handle:
        for text in TEXTS[:3]:
            handle.write(json.dumps({"text": text}) + "\n")
    assert load_training_dataset(tmp_path / "b.jsonl")["text"] == TEXTS[:3]
    Dataset.from_dict({"text": TEXTS[:4]}).save_to_disk(str(tmp_path / "saved"))
    assert load_training_dataset(tmp_path / "saved").num_rows == 4
    with pytest.raises(TrainingError):
        load_training_dataset(tmp_path / "missing.txt")


@pytest.mark.slow
def test_cli_train(fresh_tokenizer, tmp_path):
    from tokswap.cli import main

    model_dir = tmp_path / "swapped"
    make_model("llama-untied").save_pretrained(model_dir)
    fresh_tokenizer.save_pretrained(model_dir)
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    out = tmp_path / "trained"
    code = main(
        [
            "train",
            str(model_dir),
            "--dataset",
            str(data),
            "--output",
            str(out),
            "--stage1-steps",
            "2",
            "--stage2-steps",
            "1",
            "--max-length",
            "32",
            "--batch-size",
            "2",
        ]
    )
    assert code == 0
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert json.loads((out / "config.json").read_text())["vocab_size"] == PADDED_VOCAB
    assert latest_checkpoint(out / "stage1").endswith("checkpoint-2")


# --------------------------------------------------------------------------------------------------
# Non-finite weights and losses
# --------------------------------------------------------------------------------------------------


def with_one_nan(model, row=0):
    with torch.no_grad():
        model.get_input_embeddings().weight[row, 0] = float("nan")
    return model


def test_check_finite_names_the_parameter_and_the_count(caplog):
    from tokswap.training import NonFiniteError, check_finite

    assert check_finite(make_model("llama-untied"), "the model") == {}
    model = with_one_nan(make_model("llama-untied"))
    with torch.no_grad():
        model.lm_head.weight[:2, :3] = float("inf")
    with pytest.raises(
        NonFiniteError, match=r"7 NaN/infinite .*model\.embed_tokens\.weight \(1\).*lm_head\.weight \(6\)"
    ):
        check_finite(model, "the model")
    with caplog.at_level("WARNING", logger="tokswap"):
        found = check_finite(model, "the model", allow_nonfinite=True)
    assert found == {"model.embed_tokens.weight": 1, "lm_head.weight": 6}
    assert "lm_head.weight" in caplog.text


def test_a_nan_weight_is_refused_before_training(fresh_tokenizer, text_dataset, tmp_path):
    from tokswap.training import NonFiniteError

    with pytest.raises(NonFiniteError, match="embed_tokens"):
        adapt_vocabulary(with_one_nan(make_model("llama-untied")), fresh_tokenizer, text_dataset, tiny_config(tmp_path))
    assert not (tmp_path / "run").exists()  # nothing was started


def test_a_nan_loss_stops_the_run(fresh_tokenizer, text_dataset, tmp_path):
    """Allowed NaN weights (row 0 of a tied head: every logit row has a NaN) give NaN losses: the run stops."""
    from tokswap.training import NonFiniteError

    model = with_one_nan(make_model("llama-tied"))
    config = tiny_config(tmp_path, stage1_max_steps=3, save_steps=1)
    with pytest.raises(NonFiniteError, match="diverged at step 1"):
        adapt_vocabulary(model, fresh_tokenizer, text_dataset, config, allow_nonfinite=True)
    assert latest_checkpoint(config.stage_output_dir(1)) is None  # no NaN checkpoint was written


def test_non_finite_loss_callback_reads_the_logs():
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from tokswap.training import NonFiniteError, NonFiniteLossCallback

    callback, state, control = NonFiniteLossCallback(), TrainerState(global_step=7), TrainerControl()
    args = TrainingArguments(output_dir="unused", report_to="none")
    callback.on_log(args, state, control, logs={"loss": 2.5, "grad_norm": 1.0, "learning_rate": 1e-3})
    with pytest.raises(NonFiniteError, match="step 7: grad_norm=inf"):
        callback.on_log(args, state, control, logs={"loss": 2.5, "grad_norm": float("inf")})
    assert control.should_training_stop
    with pytest.raises(NonFiniteError, match="loss=nan"):
        callback.on_log(args, state, TrainerControl(), logs={"loss": float("nan")})


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "per_device_train_batch_size",
            0,
            r"per_device_train_batch_size \(--batch-size\) must be an integer >= 1, got 0",
        ),
        ("gradient_accumulation_steps", -2, r"--grad-accum\) must be an integer >= 1"),
        ("max_length", 0, r"--max-length\) must be an integer >= 1"),
        ("save_steps", 0, r"--save-steps\) must be an integer >= 1"),
        ("logging_steps", -1, r"--logging-steps\) must be an integer >= 1"),
        ("stage1_learning_rate", 0.0, r"stage1_learning_rate \(--stage1-lr\) must be a finite number > 0"),
        ("stage2_learning_rate", -1e-4, r"--stage2-lr\) must be a finite number > 0"),
        ("stage1_max_steps", -3, r"stage1_max_steps \(--stage1-steps\) must be >= 0"),
        ("warmup_ratio", 1.5, r"warmup_ratio must be in \[0, 1\)"),
        ("merge_original_weight", 1.5, r"merge_original_weight \(--merge-original\) must be in \[0, 1\]"),
    ],
)
def test_config_ranges_are_checked(option, value, message):
    with pytest.raises(TrainingError, match=message):
        VocabAdaptationConfig(**{option: value})


def test_gradient_accumulation_through_trainer_train(fresh_tokenizer, tmp_path):
    """Stage training (TRL's SFTTrainer with tokswap's config): 4 x 1 accumulated = 1 x 4, through Trainer.train().

    transformers passes num_items_in_batch only to models that accept loss kwargs; with unequal sequence lengths a
    per-micro-batch mean would give a different update."""
    from trl import SFTTrainer

    data = Dataset.from_dict({"text": [t[: 20 + 17 * i] for i, t in enumerate(TEXTS[:4])]})
    start = make_model("llama-untied").to(torch.float64)
    results = []
    for name, batch, accumulation in (("big", 4, 1), ("accumulated", 1, 4)):
        model = copy.deepcopy(start)
        config = tiny_config(
            tmp_path / name,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            packing=False,
            sft_kwargs=dict(
                optim="sgd",
                max_grad_norm=1e9,
                lr_scheduler_type="constant",
                dataloader_drop_last=True,
                report_to="none",
                save_strategy="no",
            ),
        )
        trainer = SFTTrainer(
            model=model,
            args=config.to_sft_config(2, max_steps=1),
            train_dataset=data,
            processing_class=copy.deepcopy(fresh_tokenizer),
        )
        trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(trainer.train_dataset)  # noqa: B023
        trainer.train()
        results.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    moved = (results[0] - torch.cat([p.detach().reshape(-1) for p in start.parameters()])).abs().max()
    assert moved > 1e-4
    assert torch.allclose(results[0], results[1], rtol=0, atol=1e-6)


# --------------------------------------------------------------------------------------------------
# Stage 1 with the copied rows kept fixed
# --------------------------------------------------------------------------------------------------


def copied_rows_alignment(num_rows: int, copied: list):
    """An alignment whose rows `copied` are IDENTICAL and every other row a FALLBACK row."""
    import numpy as np

    from tokswap.alignment import RowSource, TokenAlignment

    sources = np.full(num_rows, RowSource.FALLBACK, dtype=np.int8)
    sources[copied] = RowSource.IDENTICAL
    return TokenAlignment(target_to_source=np.arange(num_rows, dtype=np.int64), row_sources=sources)


def test_copied_rows_are_the_identical_and_special_rows():
    import numpy as np

    from tokswap.alignment import RowSource

    alignment = copied_rows_alignment(8, [0, 3])
    alignment.row_sources[5] = RowSource.SPECIAL
    alignment.row_sources[6] = RowSource.GLOVE
    assert alignment.copied_rows().tolist() == [0, 3, 5]
    assert isinstance(alignment.copied_rows(), np.ndarray)


@pytest.mark.parametrize("arch", ["llama-untied", "llama-tied"])
def test_stage1_frozen_rows_stay_fixed_and_the_rest_train(arch, fresh_tokenizer, text_dataset, tmp_path):
    model = make_model(arch)
    copied = list(range(0, PADDED_VOCAB, 2))
    before = [p.detach().clone() for p in embedding_parameters(model)]
    config = tiny_config(tmp_path, stage1_frozen_rows="copied", weight_decay=0.0)
    alignment = copied_rows_alignment(PADDED_VOCAB, copied)

    result = adapt_vocabulary(model, fresh_tokenizer, text_dataset, config, alignment=alignment)

    after = embedding_parameters(result.model)
    assert len(after) == len(before) == (1 if arch == "llama-tied" else 2)
    free = [row for row in range(PADDED_VOCAB) if row % 2]
    for old, new in zip(before, after):
        assert torch.equal(new.detach()[copied], old[copied])
        assert not torch.equal(new.detach()[free], old[free])
    # the hooks are gone once stage 1 ends: a later backward reaches every row
    result.model.zero_grad()
    ids = torch.tensor([[1, 2, 3, 4]])
    result.model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is None or p.grad[copied].abs().sum() > 0 for p in after)


def test_stage1_frozen_rows_need_the_alignment(fresh_tokenizer, text_dataset, tmp_path):
    with pytest.raises(TrainingError, match="needs the swap's alignment"):
        adapt_vocabulary(make_model("llama-untied"), fresh_tokenizer, text_dataset,
                         tiny_config(tmp_path, stage1_frozen_rows="copied"))  # fmt: skip
    with pytest.raises(TrainingError, match="stage1_frozen_rows='all' is not one of"):
        VocabAdaptationConfig(stage1_frozen_rows="all")


def test_cli_train_frozen_rows_without_an_alignment_folder(fresh_tokenizer, tmp_path, capsys):
    from tokswap.cli import main

    model_dir = tmp_path / "plain"
    make_model("llama-untied").save_pretrained(model_dir)
    fresh_tokenizer.save_pretrained(model_dir)
    data = tmp_path / "corpus.txt"
    data.write_text("\n".join(TEXTS))
    code = main(["train", str(model_dir), "--dataset", str(data), "--output", str(tmp_path / "out"),
                 "--stage1-frozen-rows", "copied"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "needs the swap's alignment" in err and "Traceback" not in err


@pytest.mark.parametrize("arch", ["llama-untied", "llama-tied"])
def test_restricted_embedding_updates_reach_only_the_batch_rows(arch):
    from tokswap.modeling import restrict_embedding_updates_to_batch

    model = make_model(arch)
    ids = torch.tensor([[5, 9, 12, 9]])
    handles = restrict_embedding_updates_to_batch(model)
    model(input_ids=ids, labels=ids).loss.backward()
    for param in embedding_parameters(model):
        touched = param.grad.abs().sum(dim=-1).nonzero().flatten().tolist()
        assert touched == [5, 9, 12]
    for handle in handles:
        handle.remove()
    model.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()  # lifted: the softmax reaches every row again
    assert int((model.get_output_embeddings().weight.grad.abs().sum(dim=-1) > 0).sum()) == PADDED_VOCAB


@pytest.mark.parametrize("arch", ["llama-untied", "llama-tied"])
def test_sparse_embedding_updates_keep_unseen_rows(arch, fresh_tokenizer, text_dataset, tmp_path):
    model = make_model(arch)
    before = [p.detach().clone() for p in embedding_parameters(model)]
    config = tiny_config(tmp_path, sparse_embedding_updates=True, weight_decay=0.0, stage2_max_steps=2)

    result = adapt_vocabulary(model, fresh_tokenizer, text_dataset, config)

    seen = {i for text in TEXTS for i in fresh_tokenizer(text).input_ids}
    seen |= {fresh_tokenizer.bos_token_id, fresh_tokenizer.eos_token_id, fresh_tokenizer.pad_token_id}
    unseen = [row for row in range(PADDED_VOCAB) if row not in seen]
    assert len(unseen) >= PADDED_VOCAB - len(fresh_tokenizer)
    for old, new in zip(before, embedding_parameters(result.model)):
        assert torch.equal(new.detach()[unseen], old[unseen])  # both stages: no batch held them
        assert not torch.equal(new.detach()[sorted(seen - {None})], old[sorted(seen - {None})])


def test_training_never_writes_into_a_folder_tokswap_did_not_write(fresh_tokenizer, text_dataset, tmp_path):
    from tokswap.utils import OutputExistsError

    theirs = tmp_path / "their-model"
    theirs.mkdir()
    (theirs / "config.json").write_text('{"theirs": true}')
    model = make_model("gpt-neox")
    before = snapshot(model)
    config = tiny_config(tmp_path, output_dir=str(theirs), save_final_model=True)
    with pytest.raises(OutputExistsError, match="not a tokswap run"):
        adapt_vocabulary(model, fresh_tokenizer, text_dataset, config)
    assert [p.name for p in theirs.iterdir()] == ["config.json"]
    assert (theirs / "config.json").read_text() == '{"theirs": true}'
    assert not changed_parameters(model, before)

    run = tiny_config(tmp_path, stage1_max_steps=1, save_final_model=True)
    adapt_vocabulary(make_model("gpt-neox"), fresh_tokenizer, text_dataset, run)
    assert json.loads((tmp_path / "run" / "tokswap_run.json").read_text())["kind"] == "adapt_vocabulary"
    adapt_vocabulary(make_model("gpt-neox"), fresh_tokenizer, text_dataset, run)  # its own earlier run: allowed


def batches_by_stage(model, tokenizer, dataset, config) -> dict:
    """{stage: [the input ids of each training batch]}, read off the input embeddings during `adapt_vocabulary`."""
    seen, stage = {1: [], 2: []}, [1]
    first_of_stage2 = config.stage_max_steps(1)

    def record(_module, inputs):
        if torch.is_grad_enabled():  # training forwards only
            seen[stage[0]].append(inputs[0].tolist())
            if len(seen[1]) == first_of_stage2:
                stage[0] = 2

    handle = model.get_input_embeddings().register_forward_pre_hook(record)
    try:
        adapt_vocabulary(model, tokenizer, dataset, config)
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("packing", [False, True])
@pytest.mark.parametrize("fresh", [False, True])
def test_stage2_fresh_order_reads_other_batches_than_stage1(fresh, packing, fresh_tokenizer, tmp_path):
    """Both stages draw the same seeded order unless `stage2_fresh_order`: stage 2 then starts by re-reading stage 1's
    batches (what every earlier run did); with it, stage 2's first batches are others."""
    dataset = Dataset.from_dict({"text": TEXTS * 4})  # many rows, so two orders rarely start alike
    config = tiny_config(
        tmp_path, stage1_max_steps=3, stage2_max_steps=3, packing=packing, stage2_fresh_order=fresh, logging_steps=10
    )
    assert config.to_sft_config(1).data_seed is None
    assert config.to_sft_config(2).data_seed == (config.seed + 1 if fresh else None)
    assert config.to_self_distillation_config(2).data_seed == config.to_sft_config(2).data_seed  # both recoveries
    seen = batches_by_stage(make_model("llama-untied"), fresh_tokenizer, dataset, config)
    assert len(seen[1]) == len(seen[2]) == 3
    assert (seen[2] == seen[1]) is not fresh
