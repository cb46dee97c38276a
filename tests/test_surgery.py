"""Embedding surgery (`tokswap.surgery`) and init methods (`tokswap.init_methods`) on tiny models.

Tiny models of several families are built from configs; the tokenizers are real (tokswap assets).
Alignments are built here without GloVe: byte-identical tokens map directly, every other target
token is a FALLBACK row over the source pieces its text splits into.
"""

import numpy as np
import pytest
import torch

from tokswap.alignment import AlignmentError, RowSource, TokenAlignment, tokenizer_fingerprint
from tokswap.init_methods import (
    INIT_METHODS,
    InitMethodError,
    UnknownInitMethodError,
    get_init_method,
    source_pieces,
    sparsemax,
)
from tokswap.loading import load_tokenizer
from tokswap.surgery import MissingSpecialTokenError, SurgeryError, swap_vocabulary

pytestmark = pytest.mark.usefixtures("hub")  # talks to the loopback Hub

transformers = pytest.importorskip("transformers")

TEXTS = [
    "The quick brown fox jumps over the lazy dog. Tokenizers split text into pieces.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Die Würde des Menschen ist unantastbar. Всеобщая декларация прав человека.",
    "人人生而自由，在尊严和权利上一律平等。すべての人間は、生まれながらにして自由である。",
    "Solve $x^2 - 5x + 6 = 0$: the roots are $x = 2$ and $x = 3$.",
]


# --------------------------------------------------------------------------- fixtures
def _tokenizer(name):

    tokenizer = load_tokenizer(name)  # a failure to load an asset is a failure, never a skip
    if tokenizer.eos_token is None:  # the packaged Llama-3 tokenizer carries no special-token map
        tokenizer.eos_token = "<|end_of_text|>" if "<|end_of_text|>" in tokenizer.get_vocab() else "<|endoftext|>"
    return tokenizer


@pytest.fixture(scope="session")
def neox_tokenizer():
    return _tokenizer("gpt-neox")


@pytest.fixture(scope="session")
def qwen_tokenizer():
    return _tokenizer("qwen2.5")


def build_test_alignment(source_tokenizer, target_tokenizer) -> TokenAlignment:
    """Identical tokens (same token string, byte-level BPE on both sides) + FALLBACK pieces."""
    source_vocab = source_tokenizer.get_vocab()
    n = len(target_tokenizer)
    target_to_source = np.zeros(n, dtype=np.int64)
    codes = np.full(n, RowSource.FALLBACK, dtype=np.int8)
    for token, target_id in target_tokenizer.get_vocab().items():
        source_id = source_vocab.get(token)
        if source_id is not None and target_id < n:
            target_to_source[target_id] = source_id
            codes[target_id] = RowSource.IDENTICAL
    fallback = np.flatnonzero(codes == RowSource.FALLBACK)
    piece_indptr, pieces = source_pieces(source_tokenizer, target_tokenizer, fallback, len(source_tokenizer))
    lengths = np.zeros(n, dtype=np.int64)
    lengths[fallback] = np.diff(piece_indptr)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    # A fallback row's own target_to_source: its first piece (or 0).
    firsts = np.where(lengths[fallback] > 0, pieces[np.minimum(piece_indptr[:-1], max(len(pieces) - 1, 0))], 0)
    target_to_source[fallback] = firsts
    return TokenAlignment(
        target_to_source=target_to_source,
        scores=(codes == RowSource.IDENTICAL).astype(np.float32),
        row_sources=codes,
        fallback_indptr=indptr,
        fallback_indices=pieces,
        config={
            "source_tokenizer": tokenizer_fingerprint(source_tokenizer),
            "target_tokenizer": tokenizer_fingerprint(target_tokenizer),
        },
    )


def identity_alignment(tokenizer) -> TokenAlignment:
    n = len(tokenizer)
    fingerprint = tokenizer_fingerprint(tokenizer)
    return TokenAlignment(
        target_to_source=np.arange(n),
        row_sources=np.full(n, RowSource.IDENTICAL, dtype=np.int8),
        config={"source_tokenizer": fingerprint, "target_tokenizer": fingerprint},
    )


@pytest.fixture(scope="session")
def neox_to_qwen(neox_tokenizer, qwen_tokenizer):
    return build_test_alignment(neox_tokenizer, qwen_tokenizer)


def tiny_model(family: str, vocab_size: int, seed: int = 0, **overrides):
    """A 2-layer model of `family` with hidden size 32, random weights."""
    common = dict(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    if family == "gpt_neox":  # untied
        config = transformers.GPTNeoXConfig(**common, bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
        cls = transformers.GPTNeoXForCausalLM
    elif family == "llama":  # tied
        config = transformers.LlamaConfig(
            **common, num_key_value_heads=2, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0
        )
        cls = transformers.LlamaForCausalLM
    elif family == "qwen2":  # untied
        config = transformers.Qwen2Config(**common, num_key_value_heads=2, tie_word_embeddings=False)
        cls = transformers.Qwen2ForCausalLM
    elif family == "gemma3":  # tied, scaled embeddings, logit soft-capping
        config = transformers.Gemma3TextConfig(
            **common, num_key_value_heads=2, head_dim=8, final_logit_softcapping=30.0
        )
        cls = transformers.Gemma3ForCausalLM
    elif family == "phi":  # lm_head with a bias
        config = transformers.PhiConfig(**common, bos_token_id=0, eos_token_id=0)
        cls = transformers.PhiForCausalLM
    else:
        raise ValueError(family)
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    model = cls(config).eval()
    if family == "phi":  # random (not zero) bias so that the test sees it moved
        with torch.no_grad():
            model.get_output_embeddings().bias.normal_()
    return model


def _batch(tokenizer):
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in TEXTS]
    return [torch.tensor([row]) for row in ids]


FAMILIES = ["gpt_neox", "llama", "qwen2", "gemma3", "phi"]


# --------------------------------------------------------------------------- identity swap
@pytest.mark.parametrize("family", FAMILIES)
def test_swap_to_same_tokenizer_keeps_logits(family, neox_tokenizer):
    n = len(neox_tokenizer)
    model = tiny_model(family, vocab_size=50304)
    tied_before = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    with torch.no_grad():
        before = [model(x).logits[..., :n].clone() for x in _batch(neox_tokenizer)]
    old_head = model.get_output_embeddings().weight.detach().clone()

    returned = swap_vocabulary(
        model, identity_alignment(neox_tokenizer), neox_tokenizer, source_tokenizer=neox_tokenizer
    )

    assert returned is model
    assert model.config.vocab_size == 50304 == model.get_input_embeddings().weight.shape[0]
    assert model.get_output_embeddings().weight.shape[0] == 50304
    tied_after = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert tied_after == tied_before == bool(model.config.tie_word_embeddings)
    if not tied_before:  # the head was rewritten from its own rows, not from the input embeddings
        assert torch.equal(model.get_output_embeddings().weight[:n], old_head[:n])
    with torch.no_grad():
        after = [model(x).logits[..., :n] for x in _batch(neox_tokenizer)]
    for a, b in zip(before, after):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------- real tokenizer pair
# (family, init method) swaps neox -> qwen2.5 shared by several tests: each costs seconds.
SWAPS = [
    ("gpt_neox", "tokalign"),
    ("llama", "tokalign"),
    ("gemma3", "tokalign"),
    ("qwen2", "random"),
    ("gpt_neox", "random_permutation"),
    ("llama", "mean"),
    ("gpt_neox", "multivariate"),
    ("phi", "tokalign"),
]


@pytest.fixture(scope="module")
def swapped(neox_to_qwen, neox_tokenizer, qwen_tokenizer):
    """swapped(family, method) -> (model, old input weight, old output weight, old bias), cached."""
    cache = {}

    def get(family, method):
        if (family, method) not in cache:
            model = tiny_model(family, vocab_size=50304)
            head = model.get_output_embeddings()
            old = (
                model.get_input_embeddings().weight.detach().clone(),
                head.weight.detach().clone(),
                None if head.bias is None else head.bias.detach().clone(),
            )
            swap_vocabulary(model, neox_to_qwen, qwen_tokenizer, init_method=method, source_tokenizer=neox_tokenizer)
            cache[(family, method)] = (model, *old)
        return cache[(family, method)]

    return get


@pytest.mark.parametrize("family,method", SWAPS)
def test_identical_tokens_are_exact_copies(family, method, swapped, neox_to_qwen):
    model, old_in, old_out, _ = swapped(family, method)
    identical = np.flatnonzero(neox_to_qwen.row_sources == RowSource.IDENTICAL)
    assert len(identical) > 10_000
    rows, sources = torch.from_numpy(identical), torch.from_numpy(neox_to_qwen.target_to_source[identical])
    new_in, new_out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert torch.equal(new_in[rows], old_in[sources])
    assert torch.equal(new_out[rows], old_out[sources])
    assert new_in.shape[0] == new_out.shape[0] == model.config.vocab_size == 151680  # 151665 padded to 64
    assert new_in.dtype == old_in.dtype
    assert (new_in is new_out) == bool(model.config.tie_word_embeddings)  # tied stays tied, untied stays untied
    # Non-shared rows really were initialized (no NaN / uninitialized memory).
    assert torch.isfinite(new_in).all() and torch.isfinite(new_out).all()


def test_tokalign_fallback_rows_are_mean_of_pieces(swapped, neox_to_qwen):
    model, old_in, old_out, _ = swapped("gpt_neox", "tokalign")
    fallback = np.flatnonzero(neox_to_qwen.row_sources == RowSource.FALLBACK)
    checked = 0
    for target_id in fallback[:: max(1, len(fallback) // 50)]:
        pieces = torch.from_numpy(neox_to_qwen.fallback_sources(int(target_id)))
        if len(pieces) == 0:
            continue
        for new, old in (
            (model.get_input_embeddings().weight, old_in),
            (model.get_output_embeddings().weight, old_out),
        ):
            torch.testing.assert_close(new[int(target_id)], old[pieces].mean(0), rtol=1e-5, atol=1e-6)
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("family,method", SWAPS)
def test_padding_rows_never_win_argmax(family, method, swapped, qwen_tokenizer):
    model = swapped(family, method)[0]
    n_real = len(qwen_tokenizer)
    assert model.config.vocab_size > n_real  # there is padding to test
    with torch.no_grad():
        for x in _batch(qwen_tokenizer):
            logits = model(x).logits[0]
            assert int(logits.argmax(-1).max()) < n_real
            assert bool((logits[:, n_real:].max(-1).values <= logits[:, :n_real].max(-1).values).all())


def test_lm_head_bias_is_rewritten(swapped, neox_to_qwen):
    model, _, _, old_bias = swapped("phi", "tokalign")
    bias = model.get_output_embeddings().bias
    assert bias.shape == (151680,)
    identical = np.flatnonzero(neox_to_qwen.row_sources == RowSource.IDENTICAL)
    assert torch.equal(
        bias[torch.from_numpy(identical)], old_bias[torch.from_numpy(neox_to_qwen.target_to_source[identical])]
    )


def test_config_generation_config_and_dtype_follow_target(neox_to_qwen, neox_tokenizer, qwen_tokenizer):
    model = tiny_model("llama", vocab_size=50304).to(torch.bfloat16)
    swap_vocabulary(model, neox_to_qwen, qwen_tokenizer, source_tokenizer=neox_tokenizer, pad_to_multiple_of=128)
    assert model.config.vocab_size == 151680 and 151680 % 128 == 0
    assert model.model.vocab_size == 151680  # the cached module attribute too
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
    assert model.get_input_embeddings().num_embeddings == 151680
    assert model.config.eos_token_id == qwen_tokenizer.eos_token_id == model.generation_config.eos_token_id
    assert model.config.pad_token_id == qwen_tokenizer.pad_token_id == model.generation_config.pad_token_id
    assert model.config.bos_token_id is None and model.generation_config.bos_token_id is None  # Qwen has no bos
    assert model.get_input_embeddings().padding_idx == qwen_tokenizer.pad_token_id


def test_no_padding_when_disabled(neox_tokenizer):
    model = tiny_model("qwen2", vocab_size=50304)
    swap_vocabulary(model, identity_alignment(neox_tokenizer), neox_tokenizer, pad_to_multiple_of=None)
    assert model.config.vocab_size == len(neox_tokenizer) == model.get_output_embeddings().weight.shape[0]


def test_generation_stops_at_new_eos(swapped, qwen_tokenizer):
    model = swapped("qwen2", "random")[0]
    eos = qwen_tokenizer.eos_token_id
    calls = {"n": 0}

    def push_eos_on_fourth_step(module, inputs, output):
        calls["n"] += 1
        if calls["n"] == 4:
            output = output.clone()
            output[..., eos] += 1e4
        return output

    handle = model.get_output_embeddings().register_forward_hook(push_eos_on_fourth_step)
    prompt = torch.tensor([qwen_tokenizer("Hello, world", add_special_tokens=False)["input_ids"]])
    try:
        with torch.no_grad():
            generated = model.generate(prompt, max_new_tokens=20, do_sample=False)
    finally:
        handle.remove()
    new_tokens = generated[0, prompt.shape[1] :].tolist()
    assert len(new_tokens) == 4 and new_tokens[-1] == eos
    assert all(token < len(qwen_tokenizer) for token in new_tokens)


# --------------------------------------------------------------------------- errors
def test_error_model_without_output_embeddings(neox_tokenizer):
    config = transformers.LlamaConfig(
        vocab_size=50304,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    base = transformers.LlamaModel(config)  # no language-model head
    with pytest.raises(SurgeryError, match="no output embeddings"):
        swap_vocabulary(base, identity_alignment(neox_tokenizer), neox_tokenizer)


def test_error_target_lacks_special_token(neox_to_qwen, neox_tokenizer, qwen_tokenizer):
    from transformers import AutoTokenizer

    no_eos = AutoTokenizer.from_pretrained(qwen_tokenizer.name_or_path)
    no_eos.eos_token = None
    model = tiny_model("llama", vocab_size=50304)
    with pytest.raises(MissingSpecialTokenError, match="eos_token_id.*no eos_token"):
        swap_vocabulary(model, neox_to_qwen, no_eos, source_tokenizer=neox_tokenizer)
    assert model.config.vocab_size == 50304  # nothing was touched


def test_error_alignment_for_another_pair(neox_to_qwen, neox_tokenizer):
    model = tiny_model("llama", vocab_size=50304)
    with pytest.raises(AlignmentError, match="target tokenizer"):
        swap_vocabulary(model, neox_to_qwen, neox_tokenizer, source_tokenizer=neox_tokenizer)
    with pytest.raises(AlignmentError, match="source tokenizer"):
        swap_vocabulary(
            model, identity_alignment(neox_tokenizer), neox_tokenizer, source_tokenizer=_tokenizer("qwen2.5")
        )


def test_error_unknown_init_method(neox_tokenizer):
    model = tiny_model("llama", vocab_size=50304)
    with pytest.raises(UnknownInitMethodError) as info:
        swap_vocabulary(model, identity_alignment(neox_tokenizer), neox_tokenizer, init_method="glove-magic")
    for name in INIT_METHODS:
        assert name in str(info.value)


def test_an_init_method_giving_nan_rows_is_refused_and_the_model_left_alone(neox_tokenizer):
    from tokswap.init_methods import InitMethod

    class LeavesGaps(InitMethod):
        name = "leaves-gaps"

        def initialize(self, source_weight, alignment, generator=None, **kwargs):
            new = source_weight.new_zeros(alignment.num_target_rows, source_weight.shape[1])
            new[[3, 7]] = float("nan")
            return new

    model = tiny_model("llama", vocab_size=50304)
    before = {name: param.detach().clone() for name, param in model.named_parameters()}
    with pytest.raises(SurgeryError, match=r"'leaves-gaps' gave 2 row\(s\) NaN/infinite values \(target ids \[3, 7\]"):
        swap_vocabulary(model, identity_alignment(neox_tokenizer), neox_tokenizer, init_method=LeavesGaps())
    assert all(torch.equal(param, before[name]) for name, param in model.named_parameters())
    assert model.config.vocab_size == 50304


def test_error_alignment_beyond_model_rows(neox_to_qwen, qwen_tokenizer):
    model = tiny_model("llama", vocab_size=1000)
    with pytest.raises(AlignmentError, match="only 1000 embedding rows"):
        swap_vocabulary(model, neox_to_qwen, qwen_tokenizer)


def test_error_fvt_without_source_tokenizer(neox_to_qwen, qwen_tokenizer):
    model = tiny_model("llama", vocab_size=50304)
    with pytest.raises(InitMethodError, match="source_tokenizer"):
        swap_vocabulary(model, neox_to_qwen, qwen_tokenizer, init_method="fvt")


# --------------------------------------------------------------------------- init methods
def _scrambled_self_alignment(tokenizer, num_new: int = 1500, seed: int = 0):
    """Target = source tokenizer, but `num_new` rows pretend to be new tokens (GLOVE rows with a wrong source)."""
    alignment = identity_alignment(tokenizer)
    rng = np.random.default_rng(seed)
    special = {tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.pad_token_id}
    candidates = np.array([i for i in range(1000, len(tokenizer)) if i not in special])
    new = np.sort(rng.choice(candidates, num_new, replace=False))
    alignment.row_sources[new] = RowSource.GLOVE
    alignment.target_to_source[new] = rng.integers(0, len(tokenizer), num_new)
    return alignment, new


def test_fvt_recovers_single_piece_tokens(neox_tokenizer):
    """With the same tokenizer on both sides, a "new" token's text splits into itself: FVT gives back its own row."""
    alignment, new = _scrambled_self_alignment(neox_tokenizer)
    weight = torch.randn(len(neox_tokenizer), 16)
    out = get_init_method("fvt").initialize(
        weight, alignment, source_tokenizer=neox_tokenizer, target_tokenizer=neox_tokenizer
    )
    single = [
        i
        for i in new
        if neox_tokenizer(neox_tokenizer.decode([int(i)]), add_special_tokens=False)["input_ids"] == [int(i)]
    ]
    assert len(single) > 0.9 * len(new)
    torch.testing.assert_close(out[single], weight[single])
    shared = np.setdiff1d(np.arange(len(neox_tokenizer)), new)
    assert torch.equal(out[shared], weight[shared])


def test_focus_combines_shared_rows(neox_tokenizer):
    alignment, new = _scrambled_self_alignment(neox_tokenizer, num_new=300)
    weight = torch.randn(len(neox_tokenizer), 16)
    out = get_init_method("focus").initialize(
        weight, alignment, source_tokenizer=neox_tokenizer, target_tokenizer=neox_tokenizer
    )
    shared = np.setdiff1d(np.arange(len(neox_tokenizer)), new)
    assert torch.equal(out[shared], weight[shared])
    # A new token whose own row is shared elsewhere? No: here its FVT vector is its own row, which is
    # not among the shared rows, so FOCUS returns a convex combination of shared rows close to it.
    new_rows = out[new]
    assert torch.isfinite(new_rows).all()
    cosine = torch.nn.functional.cosine_similarity(new_rows, weight[new], dim=1)
    assert float(cosine.mean()) > 0.2  # points the same way as the token's own (hidden) row


def test_baselines_statistics():
    generator = torch.Generator().manual_seed(0)
    source = torch.randn(4000, 8, generator=generator) * torch.linspace(0.5, 2.0, 8) + 3.0
    n = 6000
    codes = np.full(n, RowSource.GLOVE, dtype=np.int8)
    codes[:100] = RowSource.IDENTICAL
    alignment = TokenAlignment(target_to_source=np.arange(n) % 4000, row_sources=codes)
    mean = get_init_method("mean").initialize(source, alignment)
    torch.testing.assert_close(mean[100:], source.mean(0).expand(n - 100, -1), rtol=1e-5, atol=1e-5)
    sampled = get_init_method("multivariate").initialize(source, alignment, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(sampled[100:].mean(0), source.mean(0), atol=0.15, rtol=0)
    torch.testing.assert_close(sampled[100:].std(0), source.std(0), atol=0, rtol=0.1)
    permuted = get_init_method("random_permutation").initialize(
        source, alignment, generator=torch.Generator().manual_seed(1)
    )
    is_source_row = (permuted[100:300, None, :] == source[None]).all(-1).any(-1)
    assert bool(is_source_row.all())  # every new row is a copy of some source row
    random_rows = get_init_method("random").initialize(
        source, alignment, generator=torch.Generator().manual_seed(1), initializer_range=0.02
    )
    assert abs(float(random_rows[100:].std()) - 0.02) < 0.002
    for out in (mean, sampled, permuted, random_rows):
        assert torch.equal(out[:100], source[:100])


def test_sparsemax_is_a_sparse_distribution():
    scores = torch.tensor([[3.0, 1.0, 0.2, -1.0], [0.5, 0.5, 0.5, 0.5]])
    probabilities = sparsemax(scores)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(2))
    assert probabilities[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(probabilities[1], torch.full((4,), 0.25))


def test_registry_names_and_papers():
    assert {"tokalign", "random", "random_permutation", "mean", "multivariate", "fvt", "focus"} <= set(INIT_METHODS)
    for name, cls in INIT_METHODS.items():
        method = get_init_method(name)
        assert method.name == name and cls.paper and cls.__doc__
    assert get_init_method("Random-Permutation").name == "random_permutation"
