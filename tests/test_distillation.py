"""Chunked token-level distillation: equality with a full-logit reference, trainer behaviour, refusals."""

import copy
import json

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("trl")

from conftest import tiny_llama
from datasets import Dataset  # noqa: E402
from tokenizers import ByteLevelBPETokenizer  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

from tokswap.distillation import (  # noqa: E402
    DistillationError,
    TokenDistillationConfig,
    TokenDistillationTrainer,
    distill,
    token_distillation_loss,
)

TEXTS = [
    f"Sample {i}: a teacher model shares its vocabulary with the student number {i}, which learns from "
    f"its distribution at every position. Item {i * 3} closes line {i % 4}."
    for i in range(40)
]


# ------------------------------------------------------------------------------------------------
# Reference: the loss from full [batch, length, vocab] logits, written independently
# ------------------------------------------------------------------------------------------------


def naive_loss(
    student_logits,
    teacher_logits,
    labels,
    vocab_size,
    alpha=0.5,
    temperature=1.0,
    divergence="forward_kl",
    num_items_in_batch=None,
):
    s, t, y = student_logits[:, :-1], teacher_logits[:, :-1], labels[:, 1:]
    mask = y != -100
    ce = F.cross_entropy(s.reshape(-1, s.shape[-1]), y.reshape(-1), ignore_index=-100, reduction="sum")
    logq = F.log_softmax(s[..., :vocab_size] / temperature, dim=-1)
    logp = F.log_softmax(t[..., :vocab_size] / temperature, dim=-1).detach()
    if divergence == "forward_kl":
        per_position = F.kl_div(logq, logp, log_target=True, reduction="none").sum(-1)
    elif divergence == "reverse_kl":
        per_position = F.kl_div(logp, logq, log_target=True, reduction="none").sum(-1)
    else:
        log_m = torch.log(0.5 * (logp.exp() + logq.exp()))
        per_position = 0.5 * F.kl_div(log_m, logp, log_target=True, reduction="none").sum(-1) + 0.5 * F.kl_div(
            log_m, logq, log_target=True, reduction="none"
        ).sum(-1)
    div = (per_position * mask).sum()
    normalizer = mask.sum() if num_items_in_batch is None else num_items_in_batch
    return (alpha * ce + (1 - alpha) * temperature**2 * div) / normalizer


def make_problem(seed=0, batch=3, length=11, hidden=8, teacher_width=12, vocab=37, student_rows=40, teacher_rows=48):
    gen = torch.Generator().manual_seed(seed)
    student_hidden = torch.randn(batch, length, hidden, dtype=torch.float64, generator=gen, requires_grad=True)
    teacher_hidden = torch.randn(batch, length, teacher_width, dtype=torch.float64, generator=gen)
    student_head = torch.nn.Linear(hidden, student_rows, bias=False).double()
    teacher_head = torch.nn.Linear(teacher_width, teacher_rows, bias=True).double()
    with torch.no_grad():
        student_head.weight.copy_(torch.randn(student_rows, hidden, dtype=torch.float64, generator=gen))
        teacher_head.weight.copy_(torch.randn(teacher_rows, teacher_width, dtype=torch.float64, generator=gen))
        teacher_head.bias.zero_()
        teacher_head.bias[vocab:] = 50.0  # padding rows that would dominate if they leaked in
    labels = torch.randint(0, vocab, (batch, length), generator=gen)
    labels[0, -4:] = -100  # right padding
    labels[1, :3] = -100  # a masked prompt
    return student_hidden, teacher_hidden, labels, student_head, teacher_head, vocab


def grads_of(loss, *tensors):
    return torch.autograd.grad(loss, tensors)


@pytest.mark.parametrize("divergence", ["forward_kl", "reverse_kl", "jsd"])
@pytest.mark.parametrize("chunk_size", [1, 5, 16, 1000])
def test_chunked_loss_equals_full_logit_reference(divergence, chunk_size):
    sh, th, labels, shead, thead, vocab = make_problem()
    kwargs = dict(alpha=0.3, temperature=2.0, divergence=divergence)
    chunked = token_distillation_loss(sh, th, labels, shead, thead, vocab, chunk_size=chunk_size, **kwargs)
    reference = naive_loss(shead(sh), thead(th), labels, vocab, **kwargs)
    assert chunked.num_positions == int((labels[:, 1:] != -100).sum())
    assert torch.allclose(chunked.loss, reference, rtol=0, atol=1e-5)
    got = grads_of(chunked.loss, sh, shead.weight)
    want = grads_of(reference, sh, shead.weight)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=0, atol=1e-5)
    assert got[1].abs().sum() > 0


def test_gradient_accumulation_normalization():
    """Two micro-batches normalized by the tokens of the whole batch add up to the loss of the whole batch."""
    sh, th, labels, shead, thead, vocab = make_problem(seed=1, batch=4)
    total = int((labels[:, 1:] != -100).sum())
    full_reference = naive_loss(shead(sh), thead(th), labels, vocab)
    want = grads_of(full_reference, sh, shead.weight)

    loss_sum = 0.0
    for part, chunk in ((slice(0, 1), 3), (slice(1, 4), 7)):
        out = token_distillation_loss(
            sh[part], th[part], labels[part], shead, thead, vocab, chunk_size=chunk, num_items_in_batch=total
        )
        loss_sum = loss_sum + out.loss
    assert torch.allclose(loss_sum, full_reference, rtol=0, atol=1e-5)
    got = grads_of(loss_sum, sh, shead.weight)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=0, atol=1e-5)
    # without the global normalizer each micro-batch would be averaged on its own: a different loss
    separate = sum(
        token_distillation_loss(sh[p], th[p], labels[p], shead, thead, vocab).loss for p in (slice(0, 1), slice(1, 4))
    )
    assert not torch.allclose(separate, full_reference, atol=1e-3)


def test_padding_columns_are_excluded():
    sh, th, labels, shead, thead, vocab = make_problem(seed=2)
    trimmed = torch.nn.Linear(thead.in_features, vocab, bias=True).double()
    with torch.no_grad():
        trimmed.weight.copy_(thead.weight[:vocab])
        trimmed.bias.copy_(thead.bias[:vocab])
    padded = token_distillation_loss(sh, th, labels, shead, thead, vocab, chunk_size=4)
    exact = token_distillation_loss(sh, th, labels, shead, trimmed, vocab, chunk_size=4)
    assert torch.allclose(padded.loss, exact.loss, atol=1e-10)


def test_divergence_is_zero_for_identical_models():
    sh, _, labels, shead, _, vocab = make_problem(seed=3)
    for divergence in ("forward_kl", "reverse_kl", "jsd"):
        out = token_distillation_loss(
            sh, sh.detach(), labels, shead, shead, vocab, chunk_size=6, divergence=divergence, temperature=1.5
        )
        assert abs(out.divergence_sum.item()) < 1e-9
        assert out.ce_sum.item() > 0


def test_nothing_to_score_gives_a_differentiable_zero():
    sh, th, labels, shead, thead, vocab = make_problem(seed=4)
    out = token_distillation_loss(sh, th, torch.full_like(labels, -100), shead, thead, vocab)
    assert out.loss.item() == 0.0 and out.num_positions == 0
    out.loss.backward()
    assert sh.grad is not None


# ------------------------------------------------------------------------------------------------
# Trainer
# ------------------------------------------------------------------------------------------------


def _train_tokenizer(texts, vocab_size):
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        texts, vocab_size=vocab_size, min_frequency=1, special_tokens=["<s>", "</s>"], show_progress=False
    )
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def tokenizer():
    return _train_tokenizer(TEXTS, 280)


@pytest.fixture(scope="module")
def dataset():
    return Dataset.from_dict({"text": TEXTS})


def llama(rows, hidden=32, seed=0, dtype=torch.float32):
    return tiny_llama(rows, hidden=hidden, seed=seed, dtype=dtype)


def distill_config(tmp_path, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path / "distill"),
        max_steps=3,
        per_device_train_batch_size=2,
        max_length=32,
        packing=True,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        distill_chunk_size=16,
    )
    kwargs.update(overrides)
    return TokenDistillationConfig(**kwargs)


def test_config_defaults_and_validation(tmp_path):
    config = TokenDistillationConfig(output_dir=str(tmp_path))
    assert (config.alpha, config.temperature, config.divergence, config.distill_chunk_size) == (
        0.5,
        1.0,
        "forward_kl",
        256,
    )
    if not torch.cuda.is_available():
        assert config.bf16 is False
    with pytest.raises(DistillationError):
        TokenDistillationConfig(output_dir=str(tmp_path), divergence="tvd")
    with pytest.raises(DistillationError):
        TokenDistillationConfig(output_dir=str(tmp_path), alpha=1.5)


def test_trainer_loss_matches_reference_on_real_models(tokenizer, dataset, tmp_path):
    """compute_loss (hidden states + chunked heads) equals the reference built from the models' own logits,
    with a teacher of another width whose vocabulary is padded differently."""
    tok = copy.deepcopy(tokenizer)
    student = llama(320, hidden=32, seed=0, dtype=torch.float64)
    teacher = llama(384, hidden=48, seed=1, dtype=torch.float64)
    config = distill_config(tmp_path, alpha=0.25, temperature=1.7, distill_chunk_size=7, packing=False)
    varied = Dataset.from_dict({"text": [t[: 30 + 9 * i] for i, t in enumerate(TEXTS[:3])]})
    trainer = TokenDistillationTrainer(
        model=student, teacher_model=teacher, args=config, train_dataset=varied, processing_class=tok
    )
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(3)])
    assert (batch["labels"] == -100).any()  # padded batch
    loss = trainer.compute_loss(trainer.model, dict(batch))
    model_inputs = {k: v for k, v in batch.items() if k != "labels"}
    reference = naive_loss(
        student(**model_inputs).logits,
        teacher(**model_inputs).logits.detach(),
        batch["labels"],
        len(tok),
        alpha=0.25,
        temperature=1.7,
    )
    assert torch.allclose(loss, reference, rtol=0, atol=1e-5)
    got = torch.autograd.grad(loss, [student.lm_head.weight, student.model.layers[0].mlp.up_proj.weight])
    want = torch.autograd.grad(reference, [student.lm_head.weight, student.model.layers[0].mlp.up_proj.weight])
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=0, atol=1e-5)


def test_kl_is_zero_when_teacher_is_the_student(tokenizer, dataset, tmp_path):
    tok = copy.deepcopy(tokenizer)
    student = llama(320)
    config = distill_config(tmp_path, max_steps=1, learning_rate=1e-9)
    trainer = TokenDistillationTrainer(
        model=student, teacher_model=copy.deepcopy(student), args=config, train_dataset=dataset, processing_class=tok
    )
    trainer.train()
    logged = [e for e in trainer.state.log_history if "forward_kl" in e]
    assert logged and abs(logged[0]["forward_kl"]) < 1e-5
    assert logged[0]["ce_loss"] > 0


@pytest.mark.slow
def test_distill_trains_student_not_teacher(tokenizer, dataset, tmp_path):
    tok = copy.deepcopy(tokenizer)
    student, teacher = llama(320, seed=0), llama(336, hidden=48, seed=1)
    student_before = {n: p.detach().clone() for n, p in student.named_parameters()}
    teacher_before = {n: p.detach().clone() for n, p in teacher.named_parameters()}
    trainer = distill(student, tok, teacher, dataset, distill_config(tmp_path, divergence="jsd"))
    assert trainer.state.global_step == 3
    assert any(not torch.equal(p, student_before[n]) for n, p in trainer.model.named_parameters())
    assert all(torch.equal(p, teacher_before[n]) for n, p in teacher.named_parameters())
    assert trainer.model.config.vocab_size == 320  # padded vocabulary kept
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert all(torch.isfinite(torch.tensor(e["loss"])) for e in logged)
    assert "jsd" in logged[0] and "ce_loss" in logged[0]


def test_distill_never_writes_into_a_folder_tokswap_did_not_write(tokenizer, dataset, tmp_path):
    from tokswap.utils import OutputExistsError

    theirs = tmp_path / "distill"
    theirs.mkdir()
    (theirs / "model.safetensors").write_bytes(b"their weights")
    student = llama(320, seed=0)
    before = {n: p.detach().clone() for n, p in student.named_parameters()}
    with pytest.raises(OutputExistsError, match="not a tokswap run"):
        distill(student, copy.deepcopy(tokenizer), llama(336, hidden=48, seed=1), dataset, distill_config(tmp_path))
    assert [p.name for p in theirs.iterdir()] == ["model.safetensors"]
    assert all(torch.equal(p, before[n]) for n, p in student.named_parameters())


def test_mismatched_tokenizer_is_refused(tokenizer, dataset, tmp_path):
    other = _train_tokenizer([t.upper() for t in TEXTS], 290)
    with pytest.raises(DistillationError, match="swap the student's tokenizer first"):
        TokenDistillationTrainer(
            model=llama(320),
            teacher_model=llama(320, seed=1),
            args=distill_config(tmp_path),
            train_dataset=dataset,
            processing_class=copy.deepcopy(tokenizer),
            teacher_tokenizer=other,
        )
    # a teacher whose head cannot even cover the tokenizer
    with pytest.raises(DistillationError, match="rows"):
        TokenDistillationTrainer(
            model=llama(320),
            teacher_model=llama(200, seed=1),
            args=distill_config(tmp_path),
            train_dataset=dataset,
            processing_class=copy.deepcopy(tokenizer),
        )


def test_teacher_from_path_with_its_tokenizer(tokenizer, dataset, tmp_path):
    tok = copy.deepcopy(tokenizer)
    teacher_dir = tmp_path / "teacher"
    llama(336, seed=1).save_pretrained(teacher_dir)
    tok.save_pretrained(teacher_dir)
    trainer = TokenDistillationTrainer(
        model=llama(320),
        teacher_model=str(teacher_dir),
        args=distill_config(tmp_path, max_steps=1),
        train_dataset=dataset,
        processing_class=tok,
    )
    trainer.train()
    assert trainer.state.global_step == 1

    other_dir = tmp_path / "other-teacher"
    llama(336, seed=1).save_pretrained(other_dir)
    _train_tokenizer([t[::-1] for t in TEXTS], 290).save_pretrained(other_dir)
    with pytest.raises(DistillationError, match="swap"):
        TokenDistillationTrainer(
            model=llama(320),
            teacher_model=str(other_dir),
            args=distill_config(tmp_path),
            train_dataset=dataset,
            processing_class=copy.deepcopy(tokenizer),
        )


@pytest.mark.slow
def test_cli_distill(tokenizer, tmp_path):
    from tokswap.cli import main

    tok = copy.deepcopy(tokenizer)
    student_dir, teacher_dir = tmp_path / "student", tmp_path / "teacher"
    llama(320).save_pretrained(student_dir)
    tok.save_pretrained(student_dir)
    llama(336, hidden=48, seed=1).save_pretrained(teacher_dir)
    tok.save_pretrained(teacher_dir)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    out = tmp_path / "out"
    code = main(
        [
            "distill",
            str(student_dir),
            "--teacher",
            str(teacher_dir),
            "--dataset",
            str(data),
            "--output",
            str(out),
            "--max-steps",
            "2",
            "--max-length",
            "32",
            "--batch-size",
            "2",
            "--chunk-size",
            "8",
        ]
    )
    assert code == 0
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()


def test_added_tokens_past_the_teacher_head_are_left_out(tokenizer):
    """Like Gemma-3 (262145 tokens, 262144 rows): a few added tokens the teacher's head cannot predict."""
    from tokswap.distillation import check_teacher_compatible

    tok = copy.deepcopy(tokenizer)
    tok.add_tokens(["<extra_added_token>"])
    assert len(tok) == tok.vocab_size + 1
    assert check_teacher_compatible(tok, llama(tok.vocab_size), student_model=llama(320)) == tok.vocab_size
    assert check_teacher_compatible(tok, llama(320), student_model=llama(320)) == len(tok)


def test_nan_weights_in_student_or_teacher_are_refused(tokenizer, dataset, tmp_path):
    from tokswap.training import NonFiniteError

    def broken(model):
        with torch.no_grad():
            model.get_input_embeddings().weight[3, 1] = float("nan")
        return model

    for student, teacher, who in (
        (broken(llama(320)), llama(320, seed=1), "student"),
        (llama(320), broken(llama(320, seed=1)), "teacher"),
    ):
        with pytest.raises(NonFiniteError, match=f"(?i)the {who} has 1 NaN/infinite.*embed_tokens"):
            TokenDistillationTrainer(
                model=student,
                teacher_model=teacher,
                args=distill_config(tmp_path),
                train_dataset=dataset,
                processing_class=copy.deepcopy(tokenizer),
            )


def test_distill_stops_on_a_nan_loss(tokenizer, dataset, tmp_path):
    from tokswap.training import NonFiniteError

    student = llama(320)
    with torch.no_grad():
        student.lm_head.weight[0, 0] = float("nan")  # every logit row holds a NaN: every loss is NaN
    with pytest.raises(NonFiniteError, match="diverged at step 1"):
        distill(
            student,
            copy.deepcopy(tokenizer),
            llama(320, seed=1),
            dataset,
            distill_config(tmp_path),
            allow_nonfinite=True,
        )


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("max_steps", -3, r"max_steps \(--max-steps\) must be -1 \(one epoch\) or an integer >= 1, got -3"),
        ("max_steps", 0, r"--max-steps\) must be -1"),
        ("per_device_train_batch_size", 0, r"--batch-size\) must be an integer >= 1"),
        ("gradient_accumulation_steps", 0, r"--grad-accum\) must be an integer >= 1"),
        ("max_length", -5, r"--max-length\) must be an integer >= 1"),
        ("learning_rate", 0.0, r"learning_rate \(--lr\) must be a finite number > 0"),
        ("logging_steps", 0, r"--logging-steps\) must be a finite number > 0"),
        ("save_steps", -1, r"--save-steps\) must be a finite number > 0"),
        ("temperature", 0.0, r"--temperature\) must be a finite number > 0"),
        ("distill_chunk_size", 0, r"--chunk-size\) must be an integer >= 1"),
    ],
)
def test_config_ranges_are_checked(option, value, message, tmp_path):
    with pytest.raises(DistillationError, match=message):
        TokenDistillationConfig(output_dir=str(tmp_path), **{option: value})


def test_gradient_accumulation_through_trainer_train(tokenizer, tmp_path):
    """4 micro-batches of 1 accumulated give the update of 1 batch of 4, through Trainer.train(): transformers
    passes num_items_in_batch to compute_loss, which must normalize by the tokens of the whole accumulated batch."""
    tok = copy.deepcopy(tokenizer)
    data = Dataset.from_dict({"text": [t[: 25 + 13 * i] for i, t in enumerate(TEXTS[:4])]})  # unequal lengths
    student, teacher = llama(320, seed=0, dtype=torch.float64), llama(320, seed=1, dtype=torch.float64)
    results = []
    for name, batch, accumulation in (("big", 4, 1), ("accumulated", 1, 4)):
        model = copy.deepcopy(student)
        config = distill_config(
            tmp_path,
            output_dir=str(tmp_path / name),
            max_steps=1,
            packing=False,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            optim="sgd",
            max_grad_norm=1e9,
            lr_scheduler_type="constant",
            alpha=0.3,
            distill_chunk_size=5,
            dataloader_drop_last=True,
            seed=0,
        )
        trainer = TokenDistillationTrainer(
            model=model, teacher_model=copy.deepcopy(teacher), args=config, train_dataset=data, processing_class=tok
        )
        trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(trainer.train_dataset)  # noqa: B023
        trainer.train()
        results.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    moved = (results[0] - torch.cat([p.detach().reshape(-1) for p in student.parameters()])).abs().max()
    assert moved > 1e-4
    assert torch.allclose(results[0], results[1], rtol=0, atol=1e-6)
