"""Self-distillation across a swap: byte alignment of two tokenizations, the chunked loss against a
full-logit reference, zero loss for a model against itself, and exact gradient accumulation through the
real Trainer."""

import copy
import math

import numpy as np
import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from tokswap.align.byte_offsets import aligned_windows, chunk_ids, shared_boundaries, token_byte_ends  # noqa: E402
from tokswap.align.leading_pieces import leading_piece_groups  # noqa: E402
from tokswap.align.vocab import special_token_ids, token_bytes  # noqa: E402
from tokswap.loading import load_tokenizer
from tokswap.self_distillation import (  # noqa: E402
    SelfDistillationConfig,
    SelfDistillationError,
    SelfDistillationTrainer,
    build_self_distillation_dataset,
    collate_self_distillation,
    group_logprobs,
    self_distill,
    self_distillation_loss,
)

TEXTS = [
    f"Sample {i}: the original model teaches its swapped self, number {i}, chunk by chunk of shared text. "
    f"Item {i * 7} closes line {i % 5}."
    for i in range(40)
]
MIXED = (
    "Hello world! café naïve 東京は日本の首都です。 😀👍🏽 def f(x):\n    return x**2  # ok\n"
    "Привет, мир. مرحبا بالعالم  \t tabs\u00a0nbsp ĠŁ"
)


@pytest.fixture(scope="module")
def student_tokenizer(train_bpe_tokenizer):
    return train_bpe_tokenizer(TEXTS, 300)


@pytest.fixture(scope="module")
def teacher_tokenizer(train_bpe_tokenizer):
    return train_bpe_tokenizer(TEXTS[::2], 270)


@pytest.fixture(scope="module")
def wide_teacher_tokenizer(train_bpe_tokenizer):
    """A teacher with merges the student lacks: some of its tokens are spelled with several student pieces."""
    return train_bpe_tokenizer(TEXTS[::2], 360)


def llama(rows, hidden=16, seed=0, dtype=torch.float64, tied=False):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=rows,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=tied,
    )
    return LlamaForCausalLM(config).to(dtype)


# ------------------------------------------------------------------------------------------------
# Byte alignment on real tokenizer pairs
# ------------------------------------------------------------------------------------------------


def _prefix_boundaries(tokenizer, ids, text) -> set:
    """Independent check: byte lengths of the prefixes that decode to a prefix of the text."""
    found = set()
    for k in range(1, len(ids) + 1):
        prefix = tokenizer.decode(ids[:k], clean_up_tokenization_spaces=False)
        if "\ufffd" not in prefix and text.startswith(prefix):
            found.add(len(prefix.encode("utf-8")))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("target", ["qwen2.5", "llama3", "gemma3", "gpt-neox"])
def test_shared_boundaries_on_real_tokenizer_pairs(target):

    source, other = load_tokenizer("smollm2"), load_tokenizer(target)
    encode = lambda tok: tok(MIXED, add_special_tokens=False)["input_ids"]  # noqa: E731
    s_ids, t_ids = encode(source), encode(other)
    s_ends, t_ends = token_byte_ends(source, s_ids, MIXED), token_byte_ends(other, t_ids, MIXED)
    assert s_ends is not None and t_ends is not None, "the tokens must spell the text byte for byte"
    assert s_ends[-1] == t_ends[-1] == len(MIXED.encode("utf-8"))
    shared = shared_boundaries(s_ends, t_ends)
    data = MIXED.encode("utf-8")
    # every boundary found is a real one: both sides' tokens before it spell exactly the text before it
    spelled = lambda tok, ids, ends, b: len(ids[: int(np.searchsorted(ends, b, side="right"))])  # noqa: E731
    for b in shared:
        assert b in set(s_ends.tolist()) and b in set(t_ends.tolist())
    # at character boundaries, exactly the ones an independent decode of every prefix finds
    on_chars = {b for b in shared.tolist() if _decodes(data[:b])}
    expected = _prefix_boundaries(source, s_ids, MIXED) & _prefix_boundaries(other, t_ids, MIXED)
    assert on_chars == expected
    assert spelled(source, s_ids, s_ends, shared[-1]) == len(s_ids)


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_chunk_ids_and_windows_cut_at_shared_boundaries():
    s_ends = np.array([2, 4, 7, 9, 12])
    t_ends = np.array([4, 9, 10, 12])
    boundaries = shared_boundaries(s_ends, t_ends)
    assert boundaries.tolist() == [4, 9, 12]
    assert chunk_ids(s_ends, boundaries).tolist() == [0, 0, 1, 1, 2]
    assert chunk_ids(np.array([4, 13]), boundaries).tolist() == [0, -1]
    windows = aligned_windows(list(range(5)), s_ends, list(range(10, 14)), t_ends, 3, 3)
    # windows end at shared boundaries and never exceed either budget
    assert [(w.student_ids, w.teacher_ids) for w in windows] == [([0, 1], [10]), ([2, 3, 4], [11, 12, 13])]
    assert [w.student_chunks for w in windows] == [[0, 0], [0, 0, 1]]
    assert [w.teacher_chunks for w in windows] == [[0], [0, 1, 1]]


def test_normalizing_tokenizer_is_reported_not_guessed(student_tokenizer):
    assert (
        token_byte_ends(student_tokenizer, student_tokenizer("abc", add_special_tokens=False)["input_ids"], "abd")
        is None
    )


# ------------------------------------------------------------------------------------------------
# The loss
# ------------------------------------------------------------------------------------------------


def _batch(student_tokenizer, teacher_tokenizer, texts, max_length=24):
    data = build_self_distillation_dataset(texts, student_tokenizer, teacher_tokenizer, max_length)
    return data, collate_self_distillation([data[i] for i in range(len(data))])


def _grouped(probs, groups, num_groups):
    """Group probabilities by a one-hot matrix; tokens of group -1 dropped, the rest renormalized."""
    member = torch.zeros(len(groups), num_groups, dtype=probs.dtype)
    keep = groups >= 0
    member[torch.nonzero(keep).flatten(), groups[keep]] = 1.0
    grouped = probs @ member
    return grouped / grouped.sum()


def _teacher_spellings(student_tokenizer, teacher_tokenizer, rows):
    """Each teacher token spelled with the student tokenizer; [] where it has no whole text, is special, or is
    itself a student token (the same text)."""
    student_texts = set()
    for data in token_bytes(student_tokenizer):
        try:
            student_texts.add(data.decode("utf-8"))
        except (AttributeError, UnicodeDecodeError):
            pass
    out, specials = [], special_token_ids(teacher_tokenizer)
    for teacher_id, data in enumerate(token_bytes(teacher_tokenizer)[:rows]):
        try:
            text = data.decode("utf-8")
        except (AttributeError, UnicodeDecodeError):
            text = None
        usable = text and teacher_id not in specials and text not in student_texts
        out.append(student_tokenizer.encode(text, add_special_tokens=False) if usable else [])
    return out + [[]] * (rows - len(out))


def naive_loss(student, teacher, batch, ce_w, ll_w, hid_w, kind, pred_w=0.0, groups=None, spellings=()):
    """Full-logit reference, one chunk at a time in Python loops."""
    s_out = student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    with torch.no_grad():
        t_out = teacher(
            input_ids=batch["teacher_input_ids"],
            attention_mask=batch["teacher_attention_mask"],
            output_hidden_states=True,
        )
    s_lp = torch.log_softmax(s_out.logits, -1)
    t_lp = torch.log_softmax(t_out.logits, -1)
    total, tokens = 0.0, 0
    for b in range(batch["input_ids"].shape[0]):
        sc, tc = batch["student_chunks"][b].tolist(), batch["teacher_chunks"][b].tolist()
        for c in range(max(sc) + 1):
            s_pos = [t for t, k in enumerate(sc) if k == c]
            t_pos = [t for t, k in enumerate(tc) if k == c]
            ls = sum(s_lp[b, t - 1, batch["input_ids"][b, t]] for t in s_pos)
            lt = sum(t_lp[b, t - 1, batch["teacher_input_ids"][b, t]] for t in t_pos)
            total = total - ce_w * ls
            tokens += len(s_pos)
            if kind == "binary_kl":
                p, q = lt.exp(), ls.exp()
                total = total + ll_w * (p * (lt - ls) + (1 - p) * (torch.log(1 - p) - torch.log(1 - q)))
            else:
                total = total + ll_w * (lt - ls).abs()
            hs, ht = s_out.hidden_states[-1][b, s_pos[-1]], t_out.hidden_states[-1][b, t_pos[-1]]
            total = total + hid_w * ((hs - ht) ** 2).mean()
            if pred_w:
                ps = _grouped(s_lp[b, s_pos[0] - 1].exp(), groups.student, groups.num_groups)
                pt = _grouped(t_lp[b, t_pos[0] - 1].exp(), groups.teacher, groups.num_groups)
                held = pt > 0
                total = total + pred_w * (pt[held] * (pt[held].log() - ps[held].log())).sum()
                for k in range(1, len(s_pos)):  # inside a teacher token: its spelling's next piece
                    read = batch["input_ids"][b, s_pos[:k]].tolist()
                    q = {}
                    for teacher_id, pieces in enumerate(spellings):
                        if len(pieces) > k and pieces[:k] == read:
                            q[pieces[k]] = q.get(pieces[k], 0.0) + t_lp[b, t_pos[0] - 1, teacher_id].exp()
                    mass = sum(q.values())
                    for piece, weight in q.items():
                        total = total + pred_w * (weight / mass) * (
                            torch.log(weight / mass) - s_lp[b, s_pos[k] - 1, piece]
                        )
    return total / tokens


@pytest.mark.parametrize(
    "kind, weights",
    [
        ("binary_kl", (0.3, 0.7, 0.5, 0.4)),
        ("abs", (0.3, 0.7, 0.5, 0.4)),
        ("abs", (0.0, 0.0, 0.0, 1.0)),  # the prediction alone: only the boundaries' rows get logits
    ],
)
@pytest.mark.parametrize("chunk_size", [pytest.param(5, marks=pytest.mark.slow), 1000])  # 5: many chunks, slower
def test_chunked_loss_equals_full_logit_reference(student_tokenizer, wide_teacher_tokenizer, kind, weights, chunk_size):
    teacher_tokenizer = wide_teacher_tokenizer
    _, batch = _batch(student_tokenizer, teacher_tokenizer, [t[: 40 + 13 * i] for i, t in enumerate(TEXTS[:3])])
    assert (batch["student_chunks"] == -1).sum() > 3  # padded rows
    student = llama(len(student_tokenizer) + 4, seed=0)
    teacher = llama(len(teacher_tokenizer) + 8, seed=1)
    groups = leading_piece_groups(student_tokenizer, teacher_tokenizer, len(student_tokenizer) + 4,
                                  len(teacher_tokenizer) + 8)  # fmt: skip
    names = ("ce_weight", "likelihood_weight", "hidden_weight", "prediction_weight")
    weights, values = dict(zip(names, weights)), weights
    s_hidden = student(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True
    ).hidden_states[-1]
    with torch.no_grad():
        t_hidden = teacher(
            input_ids=batch["teacher_input_ids"],
            attention_mask=batch["teacher_attention_mask"],
            output_hidden_states=True,
        ).hidden_states[-1]
    out = self_distillation_loss(
        s_hidden,
        t_hidden,
        batch["input_ids"],
        batch["teacher_input_ids"],
        batch["student_chunks"],
        batch["teacher_chunks"],
        student.lm_head,
        teacher.lm_head,
        labels=batch["labels"],
        likelihood_loss=kind,
        chunk_size=chunk_size,
        groups=groups,
        **weights,
    )
    assert out.prediction_sum > 0 and len(groups.continuations) > 0
    spellings = _teacher_spellings(student_tokenizer, teacher_tokenizer, len(teacher_tokenizer) + 8)
    assert any(len(p) > 1 for p in spellings)
    reference = naive_loss(student, teacher, batch, *values[:3], kind, values[3], groups, spellings)
    with torch.no_grad():  # positions inside a teacher token are scored (their part is not zero)
        without_inside = naive_loss(student, teacher, batch, *values[:3], kind, values[3], groups)
        assert abs(float(reference) - float(without_inside)) > 1e-4
    assert torch.allclose(out.loss, reference, rtol=0, atol=1e-5)
    params = [student.lm_head.weight, student.model.embed_tokens.weight, student.model.layers[0].mlp.up_proj.weight]
    got = torch.autograd.grad(out.loss, params)
    want = torch.autograd.grad(reference, params)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=0, atol=1e-5)


def test_group_logprobs_equal_summed_softmax_with_dropped_and_empty_groups():
    torch.manual_seed(0)
    logits = (torch.randn(5, 12, dtype=torch.float64) * 30).requires_grad_(True)  # wide: tiny groups must not vanish
    groups = torch.tensor([0, 0, 1, 3, 3, 3, -1, 1, 0, -1, 4, 4])  # group 2 empty; two tokens dropped
    got = group_logprobs(logits, groups, 5)
    probs = torch.softmax(logits, -1)
    want = torch.stack([_grouped(row, groups, 5) for row in probs])[:, [0, 1, 3, 4]].log()
    assert torch.isinf(got[:, 2]).all() and torch.allclose(got[:, [0, 1, 3, 4]], want, atol=1e-9)
    weights = torch.rand(5, 4, dtype=torch.float64)
    g_got = torch.autograd.grad((got[:, [0, 1, 3, 4]] * weights).sum(), logits)[0]
    g_want = torch.autograd.grad((want * weights).sum(), logits)[0]
    assert torch.isfinite(g_got).all() and torch.allclose(g_got, g_want, atol=1e-9)


def test_group_logprobs_keep_faint_groups_precise_in_float32():
    # groups ~100 nats below the row's peak: exp() of their log-probabilities is 0 in float32
    torch.manual_seed(1)
    logits = torch.randn(6, 40, dtype=torch.float64) * 3
    logits[:, 28:] -= 100.0
    groups = torch.arange(40) // 4  # groups 7-9 hold only faint tokens
    want = group_logprobs(logits, groups, 10)
    assert (want[:, 7:] < -90).all()
    leaf = logits.float().requires_grad_(True)
    got = group_logprobs(leaf, groups, 10)
    assert torch.isfinite(got).all() and torch.allclose(got.double(), want, rtol=1e-6, atol=0)
    weights = torch.rand(6, 10)
    grad = torch.autograd.grad((got * weights).sum(), leaf)[0]
    reference = logits.clone().requires_grad_(True)
    want_grad = torch.autograd.grad((group_logprobs(reference, groups, 10) * weights.double()).sum(), reference)[0]
    assert torch.isfinite(grad).all() and torch.allclose(grad.double(), want_grad, atol=1e-5)


@pytest.mark.parametrize("target", ["qwen2.5", "llama3", "gemma3", "gpt-neox"])
def test_leading_piece_groups_on_real_tokenizer_pairs(target):
    source, other = load_tokenizer("smollm2"), load_tokenizer(target)
    groups = leading_piece_groups(other, source, len(other) + 3, len(source))
    vocab, source_vocab = other.get_vocab(), source.get_vocab()
    spelled = lambda tok, text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    for word in (" dries", " whipping", " placenta", " condensation", " the", " 東京", " 😀"):
        first_new, original = spelled(other, word)[0], spelled(source, word)
        piece = other.decode([first_new])
        if "\ufffd" in piece or "\ufffd" in source.decode(spelled(source, piece)[:1]):
            assert groups.student[first_new] == groups.num_groups - 1, word  # bytes, not characters: "other"
            continue
        # a new-vocabulary token's group: the original's first token of its text
        assert groups.student[first_new] == spelled(source, piece)[0], word
        # where the original spells the word whole, its mass goes where the new spelling starts
        if len(original) == 1:
            assert groups.teacher[original[0]] == groups.student[first_new], word
    # a token both vocabularies have (same bytes) is grouped alike on both sides
    for token in ("Ġthe", "Ġmodel", "ing"):
        if token in vocab and token in source_vocab:
            assert groups.teacher[source_vocab[token]] == groups.student[vocab[token]]
    assert (groups.student[len(other) :] == groups.num_groups - 1).all()  # padding rows: "other"
    assert int(groups.student.max()) < groups.num_groups and int(groups.teacher.min()) >= -1


def test_loss_is_zero_for_the_same_model_and_tokenizer(student_tokenizer):
    _, batch = _batch(student_tokenizer, student_tokenizer, TEXTS[:4])
    assert torch.equal(batch["input_ids"], batch["teacher_input_ids"])
    model = llama(len(student_tokenizer), seed=3)
    groups = leading_piece_groups(student_tokenizer, student_tokenizer, len(student_tokenizer), len(student_tokenizer))
    assert torch.equal(groups.student, groups.teacher)
    hidden = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True
    ).hidden_states[-1]
    for kind in ("binary_kl", "abs"):
        out = self_distillation_loss(
            hidden,
            hidden.detach(),
            batch["input_ids"],
            batch["teacher_input_ids"],
            batch["student_chunks"],
            batch["teacher_chunks"],
            model.lm_head,
            model.lm_head,
            ce_weight=0.0,
            likelihood_loss=kind,
            prediction_weight=1.0,
            groups=groups,
        )
        assert out.num_chunks > 0 and abs(out.loss.item()) < 1e-6 and abs(out.prediction_sum.item()) < 1e-6
        assert out.ce_sum.item() > 0  # the cross-entropy part alone is not zero


def _all_layer_hidden_term(student, teacher, batch, scale=1.0):
    """The hidden part alone, every layer matched (`hidden_layers="all"`), each state multiplied by `scale`."""
    s_states = student(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True
    ).hidden_states
    with torch.no_grad():
        t_states = teacher(
            input_ids=batch["teacher_input_ids"],
            attention_mask=batch["teacher_attention_mask"],
            output_hidden_states=True,
        ).hidden_states
    s_layers, t_layers = [scale * h for h in s_states[1:]], [scale * h for h in t_states[1:]]
    out = self_distillation_loss(
        s_layers[-1], t_layers[-1], batch["input_ids"], batch["teacher_input_ids"], batch["student_chunks"],
        batch["teacher_chunks"], student.lm_head, teacher.lm_head, ce_weight=0.0, likelihood_weight=0.0,
        hidden_weight=1.0, prediction_weight=0.0, split_weight=0.0, student_layers=s_layers, teacher_layers=t_layers,
    )  # fmt: skip
    return out, s_layers, t_layers


def test_all_layer_hidden_term_is_relative_per_layer(student_tokenizer, teacher_tokenizer):
    _, batch = _batch(student_tokenizer, teacher_tokenizer, TEXTS[:3])
    student = llama(len(student_tokenizer), seed=0)
    teacher = llama(len(teacher_tokenizer), seed=1)
    out, s_layers, t_layers = _all_layer_hidden_term(student, teacher, batch)
    pairs = []  # each chunk's last position in both rows, one chunk at a time
    for b in range(batch["input_ids"].shape[0]):
        sc, tc = batch["student_chunks"][b].tolist(), batch["teacher_chunks"][b].tolist()
        for c in range(max(sc) + 1):
            pairs.append((b, max(t for t, k in enumerate(sc) if k == c), max(t for t, k in enumerate(tc) if k == c)))
    reference = 0.0
    for hs, ht in zip(s_layers, t_layers):
        norm = sum((ht[b, t] ** 2).mean() for b, _, t in pairs) / len(pairs)
        reference = reference + sum(((hs[b, s] - ht[b, t]) ** 2).mean() for b, s, t in pairs) / norm / len(s_layers)
    tokens = int((batch["labels"][:, 1:] != -100).sum())
    assert out.num_chunks == len(pairs) > 3 and out.num_tokens == tokens
    assert torch.allclose(out.loss, reference / tokens, rtol=1e-5)  # the term is summed in float32
    # a layer ten times larger weighs the same: the error is relative to the teacher's size there
    scaled, _, _ = _all_layer_hidden_term(student, teacher, batch, scale=10.0)
    assert torch.allclose(scaled.loss, out.loss, rtol=1e-5)
    assert out.loss.item() > 0
    twin = copy.deepcopy(student)
    zero, _, _ = _all_layer_hidden_term(student, twin, {**batch, "teacher_input_ids": batch["input_ids"],
                                                        "teacher_attention_mask": batch["attention_mask"],
                                                        "teacher_chunks": batch["student_chunks"]})  # fmt: skip
    assert abs(zero.loss.item()) < 1e-9


def _naive_split(student, teacher, student_tokenizer, teacher_tokenizer, batch, groups):
    """Full-logit reference of the split part: each chunk's first teacher token, its group's members spelled
    again with the teacher tokenizer, one chunk at a time."""
    s_lp = torch.log_softmax(student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits, -1)
    with torch.no_grad():
        t_lp = torch.log_softmax(
            teacher(input_ids=batch["teacher_input_ids"], attention_mask=batch["teacher_attention_mask"]).logits, -1
        )
    student_text = {i: student_tokenizer.decode([i]) for i in range(len(student_tokenizer))}
    total, scored = 0.0, 0
    for b in range(batch["input_ids"].shape[0]):
        sc, tc = batch["student_chunks"][b].tolist(), batch["teacher_chunks"][b].tolist()
        for c in range(max(sc) + 1):
            s_first = sc.index(c)
            t_first = tc.index(c)
            first = int(batch["teacher_input_ids"][b, t_first])
            members = [v for v in range(len(student_tokenizer)) if int(groups.student[v]) == first]
            seconds = {}
            for v in members:
                pieces = teacher_tokenizer.encode(student_text[v], add_special_tokens=False)
                assert pieces[0] == first
                seconds.setdefault(pieces[1] if len(pieces) > 1 else -1, []).append(v)
            if len(seconds) < 2:
                continue
            scored += 1
            p = {k: (t_lp[b, t_first, k].exp() if k >= 0 else None) for k in seconds}
            if -1 in p:
                p[-1] = 1 - sum(x for k, x in p.items() if k >= 0)
            norm = sum(p.values())
            student_probs = s_lp[b, s_first - 1].exp()
            group = sum(student_probs[v] for v in members)
            for k, vs in seconds.items():
                q = p[k] / norm
                share = sum(student_probs[v] for v in vs) / group
                total = total + q * (torch.log(q) - torch.log(share))
    return total, scored


def test_split_kl_equals_full_logit_reference(student_tokenizer, teacher_tokenizer):
    _, batch = _batch(student_tokenizer, teacher_tokenizer, [t[: 40 + 13 * i] for i, t in enumerate(TEXTS[:3])])
    student = llama(len(student_tokenizer), seed=0)
    teacher = llama(len(teacher_tokenizer), seed=1)
    groups = leading_piece_groups(student_tokenizer, teacher_tokenizer, len(student_tokenizer), len(teacher_tokenizer))
    assert groups.splits
    s_hidden = student(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True
    ).hidden_states[-1]
    with torch.no_grad():
        t_hidden = teacher(
            input_ids=batch["teacher_input_ids"],
            attention_mask=batch["teacher_attention_mask"],
            output_hidden_states=True,
        ).hidden_states[-1]
    reference, scored = _naive_split(student, teacher, student_tokenizer, teacher_tokenizer, batch, groups)
    assert scored > 3  # several boundaries have a group to divide
    whole_head = torch.nn.Sequential(student.lm_head)  # not a plain Linear: run over the whole vocabulary
    for chunk_size, head in ((2, student.lm_head), (1000, student.lm_head), (3, whole_head)):
        out = self_distillation_loss(
            s_hidden,
            t_hidden,
            batch["input_ids"],
            batch["teacher_input_ids"],
            batch["student_chunks"],
            batch["teacher_chunks"],
            head,
            teacher.lm_head,
            labels=batch["labels"],
            ce_weight=0.0,
            likelihood_weight=0.0,
            hidden_weight=0.0,
            split_weight=0.5,
            groups=groups,
            chunk_size=chunk_size,
        )
        assert out.split_sum > 0 and torch.allclose(out.split_sum, reference.detach(), rtol=0, atol=1e-6)
        want_loss = 0.5 * reference / out.num_tokens
        assert torch.allclose(out.loss, want_loss, rtol=0, atol=1e-6)
        params = [student.lm_head.weight, student.model.layers[0].mlp.up_proj.weight]
        got = torch.autograd.grad(out.loss, params, retain_graph=True)
        want = torch.autograd.grad(want_loss, params, retain_graph=True)
        for g, w in zip(got, want):
            assert torch.allclose(g, w, rtol=0, atol=1e-6)


def test_split_is_empty_for_one_tokenizer_and_finds_real_merges(student_tokenizer):
    same = leading_piece_groups(student_tokenizer, student_tokenizer, len(student_tokenizer), len(student_tokenizer))
    assert same.splits == {}  # nothing the teacher spells in pieces: the part is zero
    source, qwen = load_tokenizer("smollm2"), load_tokenizer("qwen2.5")
    groups = leading_piece_groups(qwen, source, len(qwen), len(source))
    spelled = lambda tok, text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    for word in (" whipping", " mascara", " cashier"):
        (new_id,) = spelled(qwen, word)
        original = spelled(source, word)
        assert len(original) >= 2, word
        members, slot, seconds = groups.splits[original[0]]
        where = (members == new_id).nonzero().flatten()
        assert len(where) == 1 and int(seconds[slot[where[0]]]) == original[1], word
        # the member spelled with the leading piece alone has the slot -1
        alone = spelled(qwen, source.decode([original[0]]))
        if len(alone) == 1:
            assert int(seconds[slot[(members == alone[0]).nonzero().flatten()[0]]]) == -1


def test_config_validation(tmp_path):
    with pytest.raises(SelfDistillationError):
        SelfDistillationConfig(output_dir=str(tmp_path), likelihood_loss="mse")
    with pytest.raises(SelfDistillationError):
        SelfDistillationConfig(output_dir=str(tmp_path), ce_weight=0, prediction_weight=0, split_weight=0)
    with pytest.raises(SelfDistillationError):
        SelfDistillationConfig(output_dir=str(tmp_path), split_weight=-1)
    assert SelfDistillationConfig(output_dir=str(tmp_path), ce_weight=0, prediction_weight=0, split_weight=1)
    config = SelfDistillationConfig(output_dir=str(tmp_path))
    assert config.dataset_kwargs["skip_prepare_dataset"] and config.remove_unused_columns is False


# ------------------------------------------------------------------------------------------------
# The trainer
# ------------------------------------------------------------------------------------------------


def _config(tmp_path, name, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path / name),
        max_steps=1,
        per_device_train_batch_size=4,
        max_length=24,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        chunk_size=7,
        lr_scheduler_type="constant",
        seed=0,
        dataloader_drop_last=True,
    )
    kwargs.update(overrides)
    return SelfDistillationConfig(**kwargs)


def test_gradient_accumulation_equals_one_large_batch(student_tokenizer, teacher_tokenizer, tmp_path):
    """4 micro-batches of 1 with accumulation give the update of 1 batch of 4, through Trainer.train()."""
    data = build_self_distillation_dataset(TEXTS[:2], student_tokenizer, teacher_tokenizer, 24).select(range(4))
    lengths = {len(r) for r in data["input_ids"]}
    assert len(lengths) > 1  # the windows differ in length: normalization by tokens matters
    student = llama(len(student_tokenizer), seed=0, dtype=torch.float64)
    teacher = llama(len(teacher_tokenizer), seed=1, dtype=torch.float64)
    results = []
    for name, batch, accumulation in (("big", 4, 1), ("accumulated", 1, 4)):
        model = copy.deepcopy(student)
        config = _config(
            tmp_path,
            name,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            optim="sgd",
            max_grad_norm=1e9,
            prediction_weight=0.5,
        )
        trainer = SelfDistillationTrainer(
            model=model,
            teacher_model=copy.deepcopy(teacher),
            args=config,
            train_dataset=data,
            processing_class=copy.deepcopy(student_tokenizer),
            teacher_tokenizer=teacher_tokenizer,
        )
        trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(data)
        trainer.train()
        results.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    moved = (results[0] - torch.cat([p.detach().reshape(-1) for p in student.parameters()])).abs().max()
    assert moved > 1e-4
    assert torch.allclose(results[0], results[1], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_trainer_trains_student_not_teacher_and_logs_parts(student_tokenizer, teacher_tokenizer, tmp_path):
    student = llama(len(student_tokenizer), dtype=torch.float32, tied=True)
    teacher = llama(len(teacher_tokenizer), seed=1, dtype=torch.float32)
    before_teacher = copy.deepcopy(teacher.state_dict())
    before = student.model.embed_tokens.weight.detach().clone()
    config = _config(tmp_path, "run", max_steps=3, split_weight=0.5)
    trainer = SelfDistillationTrainer(
        model=student,
        teacher_model=teacher,
        args=config,
        train_dataset=Dataset.from_dict({"text": TEXTS}),
        processing_class=copy.deepcopy(student_tokenizer),
        teacher_tokenizer=teacher_tokenizer,
    )
    trainer.train()
    logged = [e for e in trainer.state.log_history if "hidden_loss" in e]
    assert logged and all(math.isfinite(e["chunk_likelihood_loss"]) and e["ce_loss"] > 0 for e in logged)
    assert all(e["prediction_loss"] >= 0 for e in logged)  # on by default
    assert all(e["split_loss"] > 0 for e in logged)  # the student's merges divide their groups unlike the teacher
    assert not torch.equal(before, student.model.embed_tokens.weight)
    assert all(torch.equal(v, teacher.state_dict()[k]) for k, v in before_teacher.items())


def test_self_distill_trains_checkpoints_and_resumes(student_tokenizer, teacher_tokenizer, tmp_path):
    """`self_distill()`: 2 steps with a checkpoint, then `resume_from_checkpoint=True` continues to step 3."""
    student = llama(len(student_tokenizer), dtype=torch.float32, tied=True)
    teacher = llama(len(teacher_tokenizer), seed=1, dtype=torch.float32)
    data = Dataset.from_dict({"text": TEXTS})
    rows = student.get_input_embeddings().weight.shape[0]
    config = _config(tmp_path, "run", max_steps=2, save_strategy="steps", save_steps=2)
    trainer = self_distill(student, copy.deepcopy(student_tokenizer), teacher, teacher_tokenizer, data, config)
    assert trainer.state.global_step == 2 and (tmp_path / "run" / "checkpoint-2").is_dir()
    resumed = _config(tmp_path, "run", max_steps=3, resume_from_checkpoint=True)
    trainer = self_distill(student, copy.deepcopy(student_tokenizer), teacher, teacher_tokenizer, data, resumed)
    assert trainer.state.global_step == 3
    assert student.get_input_embeddings().weight.shape[0] == rows  # the vocabulary is never shrunk
    with pytest.raises(SelfDistillationError, match="nothing to resume"):
        self_distill(
            student,
            student_tokenizer,
            teacher,
            teacher_tokenizer,
            data,
            _config(tmp_path, "elsewhere", resume_from_checkpoint=True),
        )


def test_text_column_is_required(student_tokenizer, teacher_tokenizer):
    with pytest.raises(SelfDistillationError, match="text"):
        build_self_distillation_dataset(Dataset.from_dict({"body": ["x"]}), student_tokenizer, teacher_tokenizer, 16)
