"""`TokenizerSwapper`: loading, alignment resolution, save/load round trip, CLI, delegation."""

import json
import sys
import types

import numpy as np
import pytest
import torch
from conftest import identical_rows_alignment

from tokswap.alignment import AlignmentError, RowSource, TokenAlignment, tokenizer_fingerprint
from tokswap.init_methods import DEFAULT_INIT_METHOD, UnknownInitMethodError, source_pieces
from tokswap.loading import load_tokenizer
from tokswap.swapper import SwapperError, TokenizerSwapper

transformers = pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("hub")  # talks to the loopback Hub

TEXT = "The quick brown fox jumps over the lazy dog. Всем привет! 你好，世界。 def f(x): return x * 2"


def _tokenizer(name):

    return load_tokenizer(name)  # a failure to load an asset is a failure, never a skip


def _alignment(source_tokenizer, target_tokenizer) -> TokenAlignment:
    """Identical token strings map directly; the rest are FALLBACK rows over their source pieces."""
    source_vocab = source_tokenizer.get_vocab()
    n = len(target_tokenizer)
    target_to_source = np.zeros(n, dtype=np.int64)
    codes = np.full(n, RowSource.FALLBACK, dtype=np.int8)
    for token, target_id in target_tokenizer.get_vocab().items():
        if token in source_vocab and target_id < n:
            target_to_source[target_id] = source_vocab[token]
            codes[target_id] = RowSource.IDENTICAL
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


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory):
    """A tiny untied Llama saved with the GPT-NeoX tokenizer: a local 'source model' folder."""
    tokenizer = _tokenizer("gpt-neox")
    config = transformers.LlamaConfig(
        vocab_size=50304,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    folder = tmp_path_factory.mktemp("source-model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def target_dir():
    from tokswap.offline import assets

    return assets.tokenizer_path("qwen2.5")


@pytest.fixture(scope="module")
def alignment_dir(source_dir, target_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("alignment") / "neox-qwen"
    _alignment(AutoTokenizer.from_pretrained(source_dir), AutoTokenizer.from_pretrained(target_dir)).save_pretrained(
        folder
    )
    return folder


@pytest.fixture(scope="module")
def swapper(source_dir, target_dir, alignment_dir):
    return TokenizerSwapper.from_pretrained(str(source_dir), str(target_dir), alignment=str(alignment_dir))


def _logits(model, tokenizer, text=TEXT):
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        return model(ids).logits


def test_from_pretrained_attributes(swapper, source_dir, target_dir):
    assert swapper.source_model_id == str(source_dir)
    assert swapper.init_method == DEFAULT_INIT_METHOD
    assert len(swapper.tokenizer) == 151665
    assert swapper.model.config.vocab_size == 151680
    assert swapper.alignment.num_target_rows == 151665  # the pair's alignment, not the padded copy
    assert tokenizer_fingerprint(swapper.source_tokenizer)["vocab_size"] == 50277
    record = swapper.swap_record
    assert record["alignment"]["origin"] == "loaded"
    assert record["padded_vocab_size"] == 151680 and record["source_vocab_size"] == 50304
    assert record["alignment"]["row_source_counts"]["identical"] > 10_000
    assert record["tied_embeddings"] is False
    assert swapper.model.generation_config.eos_token_id == swapper.tokenizer.eos_token_id
    assert "TokenizerSwapper(" in repr(swapper)


def test_save_pretrained_is_a_plain_transformers_folder(swapper, tmp_path):
    out = tmp_path / "swapped"
    swapper.save_pretrained(out)
    assert (out / "config.json").is_file() and (out / "tokswap_config.json").is_file()
    assert (out / "alignment" / "alignment.safetensors").is_file()
    assert not list(tmp_path.glob(".swapped.tmp-*"))  # the temporary folder was renamed away
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == len(swapper.tokenizer) and tokenizer.chat_template == swapper.tokenizer.chat_template
    assert model.config.vocab_size == 151680
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert torch.equal(_logits(model, tokenizer), _logits(swapper.model, swapper.tokenizer))
    record = json.loads((out / "tokswap_config.json").read_text())
    assert record["init_method"] == DEFAULT_INIT_METHOD and record["source_model"] == swapper.source_model_id

    reloaded = TokenizerSwapper.load(out)
    assert reloaded.alignment.num_target_rows == swapper.alignment.num_target_rows
    assert np.array_equal(reloaded.alignment.target_to_source, swapper.alignment.target_to_source)
    assert reloaded.swap_record["padded_vocab_size"] == 151680
    again = TokenizerSwapper.from_pretrained(str(out))  # a swapped folder without a target reloads
    assert torch.equal(_logits(again.model, again.tokenizer), _logits(swapper.model, swapper.tokenizer))


def test_same_tokenizer_uses_identity_and_keeps_logits(source_dir):
    reference = AutoModelForCausalLM.from_pretrained(source_dir)
    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    swapped = TokenizerSwapper.from_pretrained(str(source_dir), str(source_dir))
    assert swapped.swap_record["alignment"]["origin"] == "identity"
    n = len(tokenizer)
    assert torch.equal(_logits(swapped.model, tokenizer)[..., :n], _logits(reference, tokenizer)[..., :n])


def test_a_tokenizer_object_is_copied_not_mutated(source_dir):
    from tokswap.training import align_special_token_ids

    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    tokenizer.pad_token = None
    swapped = TokenizerSwapper.from_pretrained(str(source_dir), tokenizer)
    assert swapped.tokenizer is not tokenizer
    align_special_token_ids(swapped.model, swapped.tokenizer)  # what training does first: sets a pad token
    assert swapped.tokenizer.pad_token is not None and tokenizer.pad_token is None


@pytest.mark.slow
def test_alignment_resolution_order(source_dir, target_dir, alignment_dir, monkeypatch):
    prebuilt = TokenAlignment.from_pretrained(alignment_dir)
    prebuilt.config["hub"] = {"repo_id": "tokswap/fake", "revision": "main"}
    import tokswap.hub

    monkeypatch.setattr(tokswap.hub, "find_prebuilt_alignment", lambda source, target: prebuilt)
    swapped = TokenizerSwapper.from_pretrained(str(source_dir), str(target_dir), init_method="mean")
    assert swapped.swap_record["alignment"]["origin"] == "prebuilt"
    assert swapped.swap_record["alignment"]["repo_id"] == "tokswap/fake"
    assert swapped.init_method == "mean"

    calls = {}

    def fake_align(source, target, corpus=None, config=None):
        calls["args"] = (corpus, config)
        return TokenAlignment.from_pretrained(alignment_dir)

    monkeypatch.setattr(tokswap.hub, "find_prebuilt_alignment", lambda source, target: None)
    monkeypatch.setitem(sys.modules, "tokswap.align.pipeline", types.SimpleNamespace(align_tokenizers=fake_align))
    swapped = TokenizerSwapper.from_pretrained(
        str(source_dir), str(target_dir), corpus=["some text"], alignment_config={"dim": 8}
    )
    assert swapped.swap_record["alignment"]["origin"] == "computed"
    assert calls["args"] == (["some text"], {"dim": 8})


def test_errors(source_dir, target_dir, alignment_dir):
    with pytest.raises(UnknownInitMethodError, match="Known init methods"):
        TokenizerSwapper.from_pretrained(
            str(source_dir), str(target_dir), alignment=str(alignment_dir), init_method="nope"
        )
    with pytest.raises(SwapperError, match="No target tokenizer"):
        TokenizerSwapper.from_pretrained(str(source_dir))
    with pytest.raises(AlignmentError, match="target tokenizer"):  # alignment of another pair
        TokenizerSwapper.from_pretrained(str(source_dir), str(source_dir), alignment=str(alignment_dir))
    with pytest.raises(SwapperError, match="tokswap_config.json"):
        TokenizerSwapper.load(source_dir)


def test_train_and_distill_delegate(swapper, monkeypatch):
    import tokswap.training

    seen = {}

    def fake_adapt(model, tokenizer, dataset, config=None, **kwargs):
        seen["adapt"] = (model, tokenizer, dataset, config)
        return types.SimpleNamespace(model=model)

    def fake_distill(model, tokenizer, teacher, dataset, config=None, **kwargs):
        seen["distill"] = (model, tokenizer, teacher, dataset, config)
        return types.SimpleNamespace(model=model)

    monkeypatch.setattr(tokswap.training, "adapt_vocabulary", fake_adapt)
    monkeypatch.setitem(sys.modules, "tokswap.distillation", types.SimpleNamespace(distill=fake_distill))
    before = len(swapper.swap_record["training"])
    swapper.train(["text"], config=None)
    swapper.distill(["text"], teacher="teacher-model")
    assert seen["adapt"][:3] == (swapper.model, swapper.tokenizer, ["text"])
    assert seen["distill"][:4] == (swapper.model, swapper.tokenizer, "teacher-model", ["text"])
    assert [run["kind"] for run in swapper.swap_record["training"][before:]] == ["adapt_vocabulary", "distill"]
    del swapper.swap_record["training"][before:]


def test_train_with_merge_original_passes_the_original_model(swapper, source_dir, monkeypatch, tmp_path):
    import tokswap.training
    from tokswap.training import VocabAdaptationConfig

    seen = {}

    def fake_adapt(model, tokenizer, dataset, config=None, **kwargs):
        seen.update(kwargs)
        return types.SimpleNamespace(model=model)

    monkeypatch.setattr(tokswap.training, "adapt_vocabulary", fake_adapt)
    before = len(swapper.swap_record["training"])
    swapper.train(["text"], config=VocabAdaptationConfig(output_dir=str(tmp_path), merge_original_weight=0.5))
    original = AutoModelForCausalLM.from_pretrained(source_dir)
    assert seen["teacher_model"] is not swapper.model
    assert torch.equal(seen["teacher_model"].get_input_embeddings().weight, original.get_input_embeddings().weight)
    assert len(seen["teacher_tokenizer"]) == len(_tokenizer("gpt-neox"))
    assert swapper.swap_record["training"][-1]["config"]["merge_original_weight"] == 0.5
    del swapper.swap_record["training"][before:]


def test_cli_swap(source_dir, target_dir, alignment_dir, tmp_path, capsys):
    from tokswap.cli import main

    out = tmp_path / "cli-out"
    code = main(
        [
            "swap",
            str(source_dir),
            str(target_dir),
            "--output",
            str(out),
            "--alignment",
            str(alignment_dir),
            "--init-method",
            "random_permutation",
            "--pad-to-multiple-of",
            "128",
        ]
    )
    assert code == 0
    assert "Saved LlamaForCausalLM" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(out)
    assert (
        model.config.vocab_size == 151680
        and json.loads((out / "tokswap_config.json").read_text())["init_method"] == "random_permutation"
    )
    # A user error (alignment of another pair) is exit code 2 with a message, not a traceback.
    assert (
        main(
            [
                "swap",
                str(source_dir),
                str(source_dir),
                "--output",
                str(tmp_path / "x"),
                "--alignment",
                str(alignment_dir),
            ]
        )
        == 2
    )
    assert "error" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["swap", str(source_dir), str(target_dir), "--output", str(tmp_path / "y"), "--init-method", "nope"])


def test_cli_swap_keep_source_words(source_dir, target_dir, alignment_dir, tmp_path, capsys):
    """`--keep-source-words`: the saved tokenizer spells the source's whole words as one token each, with their rows;
    an alignment built for the target as it is, is refused with one line."""
    from tokswap.cli import main
    from tokswap.vocab_extension import keep_source_words

    source_tokenizer = AutoTokenizer.from_pretrained(source_dir)
    extension = keep_source_words(source_tokenizer, AutoTokenizer.from_pretrained(target_dir))
    extended_alignment = tmp_path / "extended-alignment"
    _alignment(source_tokenizer, extension.tokenizer).save_pretrained(extended_alignment)
    out = tmp_path / "kept"
    argv = ["swap", str(source_dir), str(target_dir), "--output", str(out), "--keep-source-words", "--alignment"]
    assert main([*argv, str(extended_alignment)]) == 0
    record = json.loads((out / "tokswap_config.json").read_text())
    assert record["kept_source_words"]["words"] == len(extension.words) > 1000
    saved = AutoTokenizer.from_pretrained(out)
    word = extension.words[0]
    (target_id,) = saved.encode(word, add_special_tokens=False)
    (source_id,) = source_tokenizer.encode(word, add_special_tokens=False)
    model = AutoModelForCausalLM.from_pretrained(out)
    source = AutoModelForCausalLM.from_pretrained(source_dir)
    torch.testing.assert_close(
        model.get_input_embeddings().weight[target_id], source.get_input_embeddings().weight[source_id]
    )
    capsys.readouterr()
    assert main([*argv[:4], str(tmp_path / "refused"), "--keep-source-words", "--alignment", str(alignment_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert "keep_source_words" in err and "Traceback" not in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_real_model_from_hub_ids(hub_asset, tmp_path):
    """SmolLM2-135M and the Qwen2.5 tokenizer by Hub id (loopback Hub), as a user would call it."""
    model_id, target_id = hub_asset("smollm2-135m"), hub_asset("qwen2.5")
    target_tokenizer = AutoTokenizer.from_pretrained(target_id)
    alignment = identical_rows_alignment(AutoTokenizer.from_pretrained(model_id), target_tokenizer)
    swapper = TokenizerSwapper.from_pretrained(
        model_id, target_id, alignment=alignment, init_method="mean", dtype=torch.float32
    )
    assert swapper.source_model_id == model_id and swapper.model.config.vocab_size == 151680
    model, tokenizer = swapper.model, swapper.tokenizer
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight  # SmolLM2 is tied
    logits = _logits(model, tokenizer)[0]
    assert int(logits.argmax(-1).max()) < len(tokenizer)  # padding rows never win on real text
    prompt = torch.tensor([tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        generated = model.generate(prompt, max_new_tokens=8, do_sample=False)
    assert generated.shape[1] <= prompt.shape[1] + 8
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id


# --------------------------------------------------------------------------- never destroy what is at the output
@pytest.fixture(scope="module")
def tiny_swapper():
    """A swapper built directly (tiny Llama, small BPE tokenizer, identity alignment): cheap to save often."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from tokswap.swapper import identity_alignment

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [TEXT] * 4, vocab_size=280, min_frequency=1, special_tokens=["<s>", "</s>"], show_progress=False
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    return TokenizerSwapper(model, tokenizer, identity_alignment(tokenizer), swap_record={"tiny": True})


def test_save_pretrained_refuses_a_folder_it_did_not_write(tiny_swapper, tmp_path):
    from tokswap.utils import OutputExistsError

    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    for overwrite in (False, True):
        with pytest.raises(OutputExistsError, match="not written by tokswap"):
            tiny_swapper.save_pretrained(out, overwrite=overwrite)
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious"]  # no temporary folder left behind

    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    for overwrite in (False, True):
        with pytest.raises(OutputExistsError, match="existing file"):
            tiny_swapper.save_pretrained(a_file, overwrite=overwrite)
    assert a_file.read_text() == "keep me"


def test_save_pretrained_replaces_its_own_output_only_with_overwrite(tiny_swapper, tmp_path):
    from tokswap.utils import OutputExistsError

    empty = tmp_path / "empty"
    empty.mkdir()
    tiny_swapper.save_pretrained(empty)  # an empty folder is fine
    assert (empty / "tokswap_config.json").is_file() and (empty / "alignment" / "alignment_config.json").is_file()
    with pytest.raises(OutputExistsError, match="--overwrite"):
        tiny_swapper.save_pretrained(empty)
    (empty / "stale.bin").write_text("from the previous run")
    tiny_swapper.save_pretrained(empty, overwrite=True)
    assert (empty / "tokswap_config.json").is_file() and not (empty / "stale.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # neither temporary nor old copies remain


def test_alignment_save_pretrained_refuses_foreign_folders(tmp_path):
    from tokswap.utils import OutputExistsError

    fingerprint = {"name_or_path": "five", "vocab_size": 5, "vocab_hash": "f" * 64}
    alignment = TokenAlignment(
        target_to_source=np.arange(5), config={"source_tokenizer": fingerprint, "target_tokenizer": fingerprint}
    )
    out = tmp_path / "al"
    alignment.save_pretrained(out)
    with pytest.raises(OutputExistsError, match="--overwrite"):
        alignment.save_pretrained(out)
    alignment.save_pretrained(out, overwrite=True)
    assert TokenAlignment.from_pretrained(out).num_target_rows == 5

    foreign = tmp_path / "model"
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")
    with pytest.raises(OutputExistsError, match="alignment_config.json"):
        alignment.save_pretrained(foreign, overwrite=True)
    assert [p.name for p in foreign.iterdir()] == ["config.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["al", "model"]


def test_cli_swap_refuses_an_existing_output_before_loading(tmp_path, capsys, monkeypatch):
    from tokswap.cli import main

    def no_loading(*args, **kwargs):
        raise AssertionError("the model must not be loaded when the output is refused")

    monkeypatch.setattr(TokenizerSwapper, "from_pretrained", no_loading)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(["swap", "src-model", "tgt-tok", "--output", str(out)]) == 2
    assert main(["swap", "src-model", "tgt-tok", "--output", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "not written by tokswap" in err and (out / "keep.txt").is_file()
    (out / "keep.txt").unlink()
    (out / "tokswap_config.json").write_text("{}")
    assert main(["swap", "src-model", "tgt-tok", "--output", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_a_source_model_with_nan_weights_is_refused_before_surgery(tiny_swapper, caplog):
    from tokswap.training import NonFiniteError

    model = transformers.LlamaForCausalLM(tiny_swapper.model.config)
    with torch.no_grad():
        model.get_input_embeddings().weight[5, 2] = float("nan")
    rows = model.get_input_embeddings().weight.shape[0]
    tokenizer = tiny_swapper.tokenizer
    with pytest.raises(NonFiniteError, match=r"1 NaN/infinite weight values in 1 parameter\(s\): model\.embed_tokens"):
        TokenizerSwapper.from_pretrained(model, tokenizer, source_tokenizer=tokenizer, pad_to_multiple_of=64)
    assert model.get_input_embeddings().weight.shape[0] == rows  # no surgery happened
    with caplog.at_level("WARNING", logger="tokswap"):
        swapped = TokenizerSwapper.from_pretrained(model, tokenizer, source_tokenizer=tokenizer, allow_nonfinite=True)
    assert "embed_tokens" in caplog.text and swapped.model is model


def test_cache_entries_replace_a_half_built_entry(tmp_path):
    """Entries of tokswap's own cache are rebuilt in place (e.g. after a crash), unlike user outputs."""
    from tokswap.utils import atomic_output_dir

    entry = tmp_path / "corpus-abc"
    entry.mkdir()
    (entry / "partial.arrow").write_text("half")
    with atomic_output_dir(entry, in_cache=True) as tmp:
        (tmp / "dataset_dict.json").write_text("{}")
    assert sorted(p.name for p in entry.iterdir()) == ["dataset_dict.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus-abc"]


def test_fit_new_words_unties_fits_and_round_trips(source_dir, target_dir, alignment_dir, tmp_path):
    from tokswap.new_word_fit import NewWordFitConfig

    swapper = TokenizerSwapper.from_pretrained(str(source_dir), str(target_dir), alignment=str(alignment_dir))
    before = swapper.model.get_input_embeddings().weight.detach().clone()
    head_before = swapper.model.get_output_embeddings().weight.detach().clone()
    report = swapper.fit_new_words(config=NewWordFitConfig(max_words=40, iterations=5), progress=False)
    assert 0 < report.num_words <= 40 and report.loss_after < report.loss_before
    after = swapper.model.get_input_embeddings().weight.detach()
    changed = (after != before).any(-1)
    assert 0 < int(changed.sum()) <= 40
    assert torch.equal(swapper.model.get_output_embeddings().weight.detach(), head_before)  # was untied already
    assert swapper.swap_record["new_word_fit"]["num_words"] == report.num_words
    swapper.save_pretrained(tmp_path / "fitted")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "fitted")
    assert torch.equal(reloaded.get_input_embeddings().weight.detach(), after)
    record = json.loads((tmp_path / "fitted" / "tokswap_config.json").read_text())
    assert record["new_word_fit"]["max_words"] == 40


def test_cli_swap_fit_new_words(source_dir, target_dir, alignment_dir, tmp_path, capsys):
    from tokswap.cli import main

    out = tmp_path / "cli-fit"
    args = ["swap", str(source_dir), str(target_dir), "--output", str(out), "--alignment", str(alignment_dir)]
    assert main(args + ["--fit-max-words", "30"]) == 2  # without --fit-new-words: a usage error
    assert "--fit-new-words" in capsys.readouterr().err
    for bad in (["--fit-output-weight", "0.5"], ["--fit-new-words", "--fit-output-weight", "2"]):
        assert main(args + bad) == 2  # without --fit-new-words, or out of 0-1
        assert "--fit-output-weight" in capsys.readouterr().err
    assert main(args + ["--fit-new-words", "--fit-max-words", "30"]) == 0
    printed = capsys.readouterr().out
    assert "Fitted 30 new words' input rows" in printed
    record = json.loads((out / "tokswap_config.json").read_text())
    assert record["new_word_fit"]["num_words"] == 30 and record["new_word_fit"]["max_words"] == 30
    model = AutoModelForCausalLM.from_pretrained(out)
    assert not model.config.tie_word_embeddings
    # with --fit-output-weight 0.5 the same fit also moves those words' output rows halfway to their input rows
    mixed_out = tmp_path / "cli-fit-mixed"
    mixed_args = ["--fit-new-words", "--fit-max-words", "30", "--fit-output-weight", "0.5", "--output", str(mixed_out)]
    assert main(args + mixed_args) == 0
    assert json.loads((mixed_out / "tokswap_config.json").read_text())["new_word_fit"]["output_weight"] == 0.5
    mixed = AutoModelForCausalLM.from_pretrained(mixed_out)
    inputs, outputs = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert torch.equal(mixed.get_input_embeddings().weight, inputs)
    moved = torch.nonzero((mixed.get_output_embeddings().weight != outputs).any(-1)).flatten()
    assert len(moved) == 30
    torch.testing.assert_close(mixed.get_output_embeddings().weight[moved], 0.5 * inputs[moved] + 0.5 * outputs[moved])


def test_fit_output_rows_fits_new_rows_from_a_text_file(source_dir, target_dir, alignment_dir, tmp_path):
    from tokswap.output_row_fit import OutputRowFitConfig, initialized_rows

    text = tmp_path / "domain.txt"
    text.write_text("\n\n".join([TEXT] * 60), encoding="utf-8")
    swapper = TokenizerSwapper.from_pretrained(str(source_dir), str(target_dir), alignment=str(alignment_dir))
    inputs_before = swapper.model.get_input_embeddings().weight.detach().clone()
    head_before = swapper.model.get_output_embeddings().weight.detach().clone()
    config = OutputRowFitConfig(window_tokens=32, min_occurrences=2, epochs=2, learning_rate=0.3)
    report = swapper.fit_output_rows(str(text), config=config, progress=False)
    head = swapper.model.get_output_embeddings().weight.detach()
    changed = set((head != head_before).any(-1).nonzero().flatten().tolist())
    assert report.rows_fitted == len(changed) > 0 and report.heldout_nll_after < report.heldout_nll_before
    assert changed <= set(initialized_rows(swapper.alignment))  # shared rows keep the source model's
    assert torch.equal(swapper.model.get_input_embeddings().weight.detach(), inputs_before)
    assert swapper.swap_record["output_row_fit"]["rows_fitted"] == report.rows_fitted
    swapper.save_pretrained(tmp_path / "fitted")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "fitted")
    assert torch.equal(reloaded.get_output_embeddings().weight.detach(), head)


def test_cli_swap_fit_output_rows_needs_text(source_dir, target_dir, alignment_dir, tmp_path, capsys):
    from tokswap.cli import main

    args = [
        "swap",
        str(source_dir),
        str(target_dir),
        "--output",
        str(tmp_path / "o"),
        "--alignment",
        str(alignment_dir),
    ]
    assert main(args + ["--fit-output-rows"]) == 2  # neither a path nor --corpus
    assert "--fit-output-rows needs text" in capsys.readouterr().err
    assert main(args + ["--fit-output-rows", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err
    assert main(args + ["--fit-output-transfer"]) == 2
    assert "--fit-output-transfer goes with --fit-output-rows" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
