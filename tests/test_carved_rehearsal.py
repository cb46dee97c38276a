"""Rehearsal of carved words: which words are picked, the short sequences that read their pieces (on the real
SmolLM2 / Qwen2.5 pair), the loss against a one-sequence-at-a-time full-softmax reference, and exact gradient
accumulation through the real Trainer."""

import copy

import pytest
import torch

pytest.importorskip("trl")

from test_self_distillation import TEXTS, llama  # noqa: E402

from tokswap import self_distillation as sd  # noqa: E402
from tokswap.align.leading_pieces import leading_piece_groups  # noqa: E402
from tokswap.carved_rehearsal import build_rehearsals, pick_words, whole_words  # noqa: E402
from tokswap.loading import load_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def pair(train_bpe_tokenizer):
    """A student tokenizer and a teacher's with merges the student lacks (words it spells in several pieces)."""
    return train_bpe_tokenizer(TEXTS, 300), train_bpe_tokenizer(TEXTS[::2], 360)


def test_pick_words_excludes_the_text_and_keeps_the_likeliest_per_window():
    logp = torch.log(
        torch.tensor(
            [
                [0.50, 0.30, 0.15, 0.05],  # word 1 is the text's next token: word 2 is picked
                [0.90, 0.05, 0.04, 0.01],  # best candidate 0.05
                [0.10, 0.10, 0.70, 0.10],  # best candidate 0.70
                [0.97, 0.01, 0.01, 0.01],  # below min_prob
            ]
        )
    )
    candidates = torch.tensor([1, 2, 3])
    text_next = torch.tensor([1, 0, 0, 0])
    windows = torch.tensor([0, 0, 0, 1])
    at, words = pick_words(logp, candidates, text_next, windows, count=2, min_prob=0.02)
    assert at.tolist() == [2, 0] and words.tolist() == [2, 2]  # window 0: 0.70 then 0.15; window 1: none
    at, words = pick_words(logp, candidates, text_next, windows, count=5, min_prob=0.02)
    assert at.tolist() == [2, 0, 1] and words.tolist() == [2, 2, 1]


def test_sequences_read_a_carved_words_pieces_after_its_context_on_real_tokenizers():
    source, target = load_tokenizer("smollm2"), load_tokenizer("qwen2.5")
    groups = leading_piece_groups(target, source, len(target), len(source))
    word = source.encode(" evaporation", add_special_tokens=False)
    assert len(word) == 1  # SmolLM2 has the word whole ...
    pieces = groups.spellings[word[0]]
    assert len(pieces) > 1 and target.decode(list(pieces)) == " evaporation"  # ... Qwen2.5 spells it in pieces
    assert all(len(p) > 1 for p in groups.spellings.values())
    text = "Water turns into vapor by"
    ids = [target.bos_token_id or target.eos_token_id] + target.encode(text, add_special_tokens=False)
    input_ids = torch.tensor([ids, ids])
    last = len(ids) - 1  # the row that predicts what follows "by"
    student_rows = torch.tensor([last, len(ids) + last])
    batch = build_rehearsals(
        input_ids, student_rows, torch.tensor([1]), torch.tensor(word), groups.spellings, groups.continuations,
        context=3, pad_id=0,
    )  # fmt: skip
    expected = [ids[0]] + ids[-3:] + list(pieces[:-1])
    assert batch.input_ids.tolist() == [expected] and batch.attention_mask.all()
    width = len(expected)
    # the positions that predict each piece after the first, each against the teacher's words spelled so far
    for row, j, (teacher_ids, nexts) in zip(batch.rows.tolist(), range(1, len(pieces)), batch.continuations):
        assert row < width and expected[row] == pieces[j - 1]
        assert word[0] in teacher_ids.tolist() and pieces[j] in nexts.tolist()
    assert batch.boundary.tolist() == [1] * (len(pieces) - 1)


def _naive_rehearsal(student, teacher, batch, groups, rehearsal_words, min_prob, context):
    """Every picked word in its own unpadded sequence, the teacher's full softmax summed by next piece."""
    teacher_out = teacher(input_ids=batch["teacher_input_ids"], attention_mask=batch["teacher_attention_mask"])
    teacher_lp = torch.log_softmax(teacher_out.logits.double(), -1)
    total, words = torch.zeros((), dtype=torch.float64), 0
    for b in range(batch["input_ids"].shape[0]):
        s_chunks, t_chunks = batch["student_chunks"][b].tolist(), batch["teacher_chunks"][b].tolist()
        candidates = []
        for chunk in range(max(s_chunks) + 1):
            s_at, t_at = s_chunks.index(chunk) - 1, t_chunks.index(chunk) - 1
            lp = teacher_lp[b, t_at]
            text_next = int(batch["teacher_input_ids"][b, t_at + 1])
            options = [(float(lp[w]), w) for w in groups.spellings if w != text_next]
            best = max(options)
            if best[0] >= torch.log(torch.tensor(min_prob, dtype=torch.float64)):
                candidates.append((best[0], s_at, t_at, best[1]))
        candidates.sort(key=lambda c: -c[0])
        for _, s_at, t_at, word in candidates[:rehearsal_words]:
            pieces = list(groups.spellings[word])
            start = max(1, s_at + 1 - context)
            seq = [int(batch["input_ids"][b, 0])] + batch["input_ids"][b, start : s_at + 1].tolist() + pieces[:-1]
            logp = torch.log_softmax(student(input_ids=torch.tensor([seq])).logits[0].double(), -1)
            words += 1
            for j in range(1, len(pieces)):
                spelled = {w: p for w, p in groups.spellings.items() if p[:j] == tuple(pieces[:j]) and len(p) > j}
                by_piece = {}
                for w, p in spelled.items():
                    by_piece[p[j]] = by_piece.get(p[j], 0.0) + teacher_lp[b, t_at, w].exp()
                norm = sum(by_piece.values())
                pos = len(seq) - len(pieces) + j
                for piece, q in by_piece.items():
                    q = q / norm
                    total = total + q * (q.log() - logp[pos, piece])
    return total, words


def test_rehearsal_loss_equals_a_full_softmax_reference_in_value_and_gradient(pair, tmp_path):
    student_tokenizer, wide_teacher_tokenizer = pair
    data = sd.build_self_distillation_dataset(TEXTS[:3], student_tokenizer, wide_teacher_tokenizer, 24)
    batch = sd.collate_self_distillation([data[i] for i in range(4)])
    student = llama(len(student_tokenizer), seed=0)
    teacher = llama(len(wide_teacher_tokenizer), seed=1)
    config = sd.SelfDistillationConfig(
        output_dir=str(tmp_path / "run"), max_length=24, report_to="none", ce_weight=0.0, prediction_weight=0.0,
        split_weight=0.0, hidden_weight=1e-12, rehearsal_weight=1.0, rehearsal_words=2, rehearsal_context=5,
        rehearsal_min_prob=1e-4,
    )  # fmt: skip
    trainer = sd.SelfDistillationTrainer(
        model=student, teacher_model=teacher, args=config, train_dataset=data,
        processing_class=copy.deepcopy(student_tokenizer), teacher_tokenizer=wide_teacher_tokenizer,
    )  # fmt: skip
    groups = trainer._groups
    assert groups.spellings  # the wide teacher has words the student spells in pieces
    teacher_hidden = teacher(
        input_ids=batch["teacher_input_ids"], attention_mask=batch["teacher_attention_mask"], output_hidden_states=True
    ).hidden_states[-1]
    got, words = trainer._rehearse(student, student, batch, teacher_hidden)
    reference_model = llama(len(student_tokenizer), seed=0)  # the same weights, outside the trainer
    want, want_words = _naive_rehearsal(reference_model, teacher, batch, groups, 2, 1e-4, 5)
    assert words == want_words and words > 0
    assert got.item() > 0 and abs(got.item() - want.item()) < 1e-5
    got.backward()
    want.backward()
    for p, q in zip(student.parameters(), reference_model.parameters()):
        gp = torch.zeros_like(p) if p.grad is None else p.grad
        gq = torch.zeros_like(q) if q.grad is None else q.grad
        assert torch.allclose(gp, gq, atol=1e-5)


def test_whole_words_keeps_words_and_drops_indentation_latex_and_code_on_real_tokenizers():
    source, target = load_tokenizer("smollm2"), load_tokenizer("qwen2.5")
    carved = sorted(leading_piece_groups(target, source, len(target), len(source)).spellings)

    def token(text):
        ids = source.encode(text, add_special_tokens=False)
        assert len(ids) == 1, text  # one SmolLM2 token ...
        assert ids[0] in carved, text  # ... that Qwen2.5 spells in pieces
        return ids[0]

    words = [token(" evaporation"), token(" inscribed"), token(" Pythagorean")]
    others = [token("\n   "), token("}{\\"), token("mathbf")]
    assert whole_words(others + words, source) == words
    kept = whole_words(carved, source)
    assert 0 < len(kept) < len(carved)
    for t in kept:  # a space, then letters, nothing else
        text = source.decode([t])
        assert text[0] == " " and text[1:].isalpha()


def test_rehearsal_is_empty_for_one_tokenizer(pair):
    student_tokenizer = pair[0]
    groups = leading_piece_groups(student_tokenizer, student_tokenizer, len(student_tokenizer), len(student_tokenizer))
    assert groups.spellings == {}  # nothing carved: nothing to rehearse


def test_rehearsal_config_validation(tmp_path):
    for bad in (dict(rehearsal_weight=-1.0), dict(rehearsal_words=0), dict(rehearsal_min_prob=0.0)):
        with pytest.raises(sd.SelfDistillationError):
            sd.SelfDistillationConfig(output_dir=str(tmp_path), max_length=24, report_to="none", **bad)


def test_vocab_adaptation_config_passes_every_rehearsal_setting_to_self_distillation(tmp_path):
    from tokswap.training import VocabAdaptationConfig

    config = VocabAdaptationConfig(
        output_dir=str(tmp_path),
        self_distill_rehearsal_weight=0.5,
        self_distill_rehearsal_whole_words=True,
        self_distill_rehearsal_words=16,
        self_distill_rehearsal_min_prob=0.001,
    )
    for stage in (1, 2):
        sd_config = config.to_self_distillation_config(stage)
        assert (sd_config.rehearsal_weight, sd_config.rehearsal_whole_words) == (0.5, True)
        assert (sd_config.rehearsal_words, sd_config.rehearsal_min_prob) == (16, 0.001)


def test_gradient_accumulation_with_rehearsal_equals_one_large_batch(pair, tmp_path):
    student_tokenizer, wide_teacher_tokenizer = pair
    data = sd.build_self_distillation_dataset(TEXTS[:3], student_tokenizer, wide_teacher_tokenizer, 24).select(range(4))
    student = llama(len(student_tokenizer), seed=0)
    teacher = llama(len(wide_teacher_tokenizer), seed=1)
    results, rehearsed = [], []
    for name, size, accumulation in (("big", 4, 1), ("accumulated", 1, 4)):
        model = copy.deepcopy(student)
        config = sd.SelfDistillationConfig(
            output_dir=str(tmp_path / name), max_steps=1, per_device_train_batch_size=size,
            gradient_accumulation_steps=accumulation, max_length=24, learning_rate=1e-2, logging_steps=1,
            save_strategy="no", report_to="none", activation_checkpointing=False, lr_scheduler_type="constant",
            seed=0, optim="sgd", max_grad_norm=1e9, rehearsal_weight=1.0, rehearsal_words=2, rehearsal_min_prob=1e-4,
        )  # fmt: skip
        trainer = sd.SelfDistillationTrainer(
            model=model, teacher_model=copy.deepcopy(teacher), args=config, train_dataset=data,
            processing_class=copy.deepcopy(student_tokenizer), teacher_tokenizer=wide_teacher_tokenizer,
        )  # fmt: skip
        trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(data)
        trainer.train()
        rehearsed.append(sum(e.get("rehearsed_words", 0) for e in trainer.state.log_history))
        results.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    assert rehearsed[0] > 0
    assert torch.allclose(results[0], results[1], rtol=0, atol=1e-5)
