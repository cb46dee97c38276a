"""Embedding surgery: give a loaded causal LM the rows of a new vocabulary, in place.

Works on any Hugging Face causal LM through `get_input_embeddings()` / `get_output_embeddings()`:
the new input and output rows are built by an init method (`tokswap.init_methods`) from the old
ones, the vocabulary is padded to a multiple, tied models stay tied, and the config, generation
config and special-token ids follow the target tokenizer.

Memory: each new matrix is built straight from the old one (one gather), swapped into the module
and the old matrix released before the next is built, so the model is never held twice. Peak
memory is the swapped model plus the smaller of the old matrices.
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np
import torch
from torch import nn

from tokswap.alignment import RowSource, TokenAlignment
from tokswap.errors import TokswapError
from tokswap.init_methods import get_init_method
from tokswap.modeling import weights_are_shared
from tokswap.utils import get_logger

logger = get_logger(__name__)

# Special-token ids a config may carry; `required` ones must exist in the target tokenizer
# whenever the source config sets them (a causal LM cannot stop generating without eos; an
# encoder-decoder cannot start decoding without its start token).
_SPECIAL_IDS = (
    # (config attribute, tokenizer attribute, required)
    ("eos_token_id", "eos_token_id", True),
    ("bos_token_id", "bos_token_id", False),
    ("pad_token_id", "pad_token_id", False),
    ("decoder_start_token_id", "bos_token_id", True),
)


class SurgeryError(TokswapError):
    """Raised when a model cannot be given the new vocabulary (missing head, tokens, rows)."""


class MissingSpecialTokenError(SurgeryError):
    """Raised when the model's config needs a special token the target tokenizer does not define."""


def _round_up(value: int, multiple: Optional[int]) -> int:
    if not multiple or multiple <= 1:
        return value
    return int(math.ceil(value / multiple) * multiple)


def _config_views(config):
    """The config and, for composite models, its text config (both carry vocab_size / token ids)."""
    views = [config]
    get_text = getattr(config, "get_text_config", None)
    if get_text is not None:
        text = get_text()
        if text is not None and text is not config:
            views.append(text)
    return views


def check_special_tokens(model, target_tokenizer) -> dict:
    """Map each special-token id of the model's config to the target tokenizer's id.

    Returns a dict `{config attribute: new id or None}` for the attributes the config has.

    Raises:
        MissingSpecialTokenError: the config sets a required id (eos, decoder start) that the
            target tokenizer does not define.
    """
    config = model.config
    new_ids = {}
    for config_attr, tokenizer_attr, required in _SPECIAL_IDS:
        if not hasattr(config, config_attr):
            continue
        old = getattr(config, config_attr, None)
        new = getattr(target_tokenizer, tokenizer_attr, None)
        if old is not None and new is None and required:
            token_name = tokenizer_attr.replace("_id", "")
            raise MissingSpecialTokenError(
                f"The model's config sets {config_attr}={old}, but the target tokenizer "
                f"'{getattr(target_tokenizer, 'name_or_path', '?')}' has no {token_name}. Give the tokenizer "
                f"one before swapping, e.g. `tokenizer.{token_name} = '<|endoftext|>'` (a token of its "
                "vocabulary that ends a document)."
            )
        if old is not None or new is not None:
            new_ids[config_attr] = new
    return new_ids


def prepare_alignment(
    alignment: TokenAlignment,
    target_tokenizer,
    num_source_rows: int,
    pad_to_multiple_of: Optional[int] = 64,
    source_tokenizer=None,
) -> TokenAlignment:
    """Check an alignment against the tokenizers and the model, and pad it to the final size.

    Raises:
        AlignmentError: the alignment was built for another tokenizer pair, does not cover the
            target tokenizer, or refers to source rows the model does not have.
    """
    alignment.verify(source_tokenizer=source_tokenizer, target_tokenizer=target_tokenizer)
    alignment.check_source_vocab_size(num_source_rows)
    num_rows = _round_up(max(len(target_tokenizer), alignment.num_target_rows), pad_to_multiple_of)
    padded = alignment.padded_to(num_rows, pad_source_id=0)
    if padded is alignment:  # no new rows: keep the caller's object untouched
        padded = TokenAlignment(
            target_to_source=alignment.target_to_source.copy(),
            scores=alignment.scores.copy(),
            row_sources=alignment.row_sources.copy(),
            fallback_indptr=alignment.fallback_indptr,
            fallback_indices=alignment.fallback_indices,
            config=dict(alignment.config),
            target_space=alignment.target_space,
        )
    # Rows past the tokenizer that the alignment still maps are unreachable by any text: padding too.
    padded.row_sources[len(target_tokenizer) :] = RowSource.PADDING
    return padded


def _check_finite_rows(new: torch.Tensor, method_name: str, source_weight: torch.Tensor) -> None:
    """A NaN/inf row built from finite source rows is the init method's fault (a registered method of the user's, a
    degenerate donor): refuse it before it reaches the model. Broken source rows the caller allowed
    (`allow_nonfinite=True`, already warned about) are carried over with a warning."""
    bad = torch.nonzero(~torch.isfinite(new).all(dim=1)).flatten()
    if len(bad) and not bool(torch.isfinite(source_weight).all()):
        logger.warning("%d new row(s) carry the source model's NaN/infinite values (allowed).", len(bad))
    elif len(bad):
        raise SurgeryError(
            f"Init method '{method_name}' gave {len(bad)} row(s) NaN/infinite values (target ids "
            f"{bad[:5].tolist()}{' ...' if len(bad) > 5 else ''}); the model was left as it was. Use another init "
            "method (e.g. 'fvt_scaled'), or fix the method or its donor."
        )


def _new_matrix(method, source_weight, alignment, padding_rows, init_kwargs, seed) -> torch.Tensor:
    """Build one new matrix with the init method, then give padding rows the mean real row.

    The mean output row can never win the argmax: its logit h·mean(w) is the mean of the real
    tokens' logits, which is at most their maximum. As an input row it is the usual neutral
    choice.
    """
    generator = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        new = method.initialize(source_weight, alignment, generator=generator, **init_kwargs)
        if new.shape != (alignment.num_target_rows, source_weight.shape[1]):
            raise SurgeryError(
                f"Init method '{method.name}' returned shape {tuple(new.shape)}, expected "
                f"{(alignment.num_target_rows, source_weight.shape[1])}."
            )
        new = new.to(dtype=source_weight.dtype, device=source_weight.device)
        _check_finite_rows(new, method.name, source_weight)
        if len(padding_rows):
            real = np.ones(new.shape[0], dtype=bool)
            real[padding_rows] = False
            num_real = int(real.sum())
            if real[:num_real].all():  # the usual case: padding is the tail, real rows a prefix
                # A vector-matrix product (BLAS) is far faster than a column sum over a big matrix.
                ones = torch.ones(num_real, dtype=new.dtype, device=new.device)
                mean_row = (ones @ new[:num_real]) / max(num_real, 1)
            else:
                total = torch.zeros(new.shape[1], dtype=torch.float64, device=new.device)
                for start in range(0, num_real, 8192):
                    chunk = torch.from_numpy(np.flatnonzero(real)[start : start + 8192]).to(new.device)
                    total += new.index_select(0, chunk).to(torch.float64).sum(0)
                mean_row = (total / max(num_real, 1)).to(new.dtype)
            new[torch.from_numpy(padding_rows).to(new.device)] = mean_row
    return new


def _replace_embedding_weight(module: nn.Module, new_weight: torch.Tensor, requires_grad: bool) -> None:
    module.weight = nn.Parameter(new_weight, requires_grad=requires_grad)
    if hasattr(module, "num_embeddings"):
        module.num_embeddings = new_weight.shape[0]
    if hasattr(module, "out_features"):
        module.out_features = new_weight.shape[0]


def swap_vocabulary(
    model,
    alignment: TokenAlignment,
    target_tokenizer,
    init_method="tokalign",
    pad_to_multiple_of: Optional[int] = 64,
    source_tokenizer=None,
    seed: int = 0,
):
    """Give `model` the vocabulary of `target_tokenizer`, in place, and return it.

    Args:
        model (`PreTrainedModel`):
            A causal LM with input and output embeddings (tied or not).
        alignment (`TokenAlignment`):
            Target id -> source id for every target token (see `tokswap.align.pipeline`).
        target_tokenizer:
            The tokenizer the model will speak; its special tokens and chat template are adopted.
        init_method (`str` or `InitMethod`, defaults to `"tokalign"`):
            How new rows are built; see `tokswap.init_methods.INIT_METHODS`.
        pad_to_multiple_of (`int`, *optional*, defaults to 64):
            Pad the vocabulary to a multiple of this (faster matmuls); `None` or 1 for no padding.
            Padding rows get the mean real row, which never wins the argmax.
        source_tokenizer (*optional*):
            The model's current tokenizer: checked against the alignment's hash, and needed by the
            `fvt` and `focus` init methods.
        seed (`int`, defaults to 0):
            Seed of the random init methods.

    Returns:
        The same model object, now with `config.vocab_size` = the padded target vocabulary.

    Raises:
        SurgeryError: the model has no output embeddings.
        MissingSpecialTokenError: the target tokenizer lacks a special token the config needs.
        AlignmentError: the alignment belongs to another tokenizer pair or to a bigger source vocabulary.
        UnknownInitMethodError: `init_method` is not registered.
    """
    method = get_init_method(init_method)
    input_embeddings, output_embeddings = _embedding_modules(model)
    if method.needs_tokenizers:
        method._require_tokenizers(source_tokenizer, target_tokenizer)  # raises the clear error early
    num_source_rows = input_embeddings.weight.shape[0]
    new_special_ids = check_special_tokens(model, target_tokenizer)
    aligned = prepare_alignment(alignment, target_tokenizer, num_source_rows, pad_to_multiple_of, source_tokenizer)
    num_rows = aligned.num_target_rows
    padding_rows = np.flatnonzero(aligned.row_sources == RowSource.PADDING)
    tied = weights_are_shared(input_embeddings.weight, output_embeddings.weight)
    views = _config_views(model.config)
    old_vocab_size = getattr(views[-1], "vocab_size", num_source_rows)
    initializer_range = float(getattr(views[-1], "initializer_range", 0.02) or 0.02)
    init_kwargs = dict(
        source_tokenizer=source_tokenizer, target_tokenizer=target_tokenizer, initializer_range=initializer_range
    )
    logger.info(
        "Swapping the vocabulary of %s: %d -> %d rows (%d padding), init '%s', %s embeddings.",
        type(model).__name__,
        num_source_rows,
        num_rows,
        len(padding_rows),
        method.name,
        "tied" if tied else "untied",
    )
    build = functools.partial(
        _new_matrix, method, alignment=aligned, padding_rows=padding_rows, init_kwargs=init_kwargs, seed=seed
    )
    _swap_input_rows(input_embeddings, build, new_special_ids.get("pad_token_id"), num_rows)
    _swap_output_rows(output_embeddings, input_embeddings, build, tied, num_rows)
    _follow_the_new_vocabulary(model, views, old_vocab_size, num_rows, new_special_ids)
    if tied and hasattr(model, "tie_weights"):
        model.tie_weights()
    return model


def _embedding_modules(model):
    """`(input embeddings, output embeddings)`, each with one row per token, or a `SurgeryError` saying why not."""
    input_embeddings = model.get_input_embeddings()
    output_embeddings = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if input_embeddings is None or getattr(input_embeddings, "weight", None) is None:
        raise SurgeryError(f"{type(model).__name__} has no input embedding matrix to swap.")
    if output_embeddings is None or getattr(output_embeddings, "weight", None) is None:
        raise SurgeryError(
            f"{type(model).__name__} has no output embeddings (no language-model head): tokswap swaps the "
            "vocabulary of causal LMs. Load the model with AutoModelForCausalLM."
        )
    num_source_rows = input_embeddings.weight.shape[0]
    if output_embeddings.weight.shape[0] != num_source_rows:
        raise SurgeryError(
            f"The input embeddings have {num_source_rows} rows but the output embeddings have "
            f"{output_embeddings.weight.shape[0]}; tokswap expects one row per token in both."
        )
    return input_embeddings, output_embeddings


def _swap_input_rows(input_embeddings, build, new_pad_id, num_rows: int) -> None:
    """Build the new input matrix and swap it in (the old one is dropped before the head is touched)."""
    old_input = input_embeddings.weight
    requires_grad = old_input.requires_grad
    new_input = build(old_input.detach())
    del old_input
    _replace_embedding_weight(input_embeddings, new_input, requires_grad)
    if getattr(input_embeddings, "padding_idx", None) is not None:
        input_embeddings.padding_idx = new_pad_id if new_pad_id is not None and new_pad_id < num_rows else None


def _swap_output_rows(output_embeddings, input_embeddings, build, tied: bool, num_rows: int) -> None:
    """The head follows: shared with the input matrix when tied, else built the same way; its bias too."""
    if tied:
        output_embeddings.weight = input_embeddings.weight
        if hasattr(output_embeddings, "out_features"):
            output_embeddings.out_features = num_rows
    else:
        old_output = output_embeddings.weight
        requires_grad = old_output.requires_grad
        new_output = build(old_output.detach())
        del old_output
        _replace_embedding_weight(output_embeddings, new_output, requires_grad)
    bias = getattr(output_embeddings, "bias", None)
    if isinstance(bias, torch.Tensor):
        new_bias = build(bias.detach().unsqueeze(1))
        output_embeddings.bias = nn.Parameter(new_bias.squeeze(1).contiguous(), requires_grad=bias.requires_grad)


def _follow_the_new_vocabulary(model, views, old_vocab_size: int, num_rows: int, new_special_ids: dict) -> None:
    """Config, module attributes, generation config and special token ids follow the target tokenizer."""
    for view in views:
        view.vocab_size = num_rows
    for module in model.modules():  # models that cache vocab_size on a module (e.g. for the loss)
        if isinstance(getattr(module, "vocab_size", None), int) and module.vocab_size == old_vocab_size:
            module.vocab_size = num_rows
    generation_config = getattr(model, "generation_config", None)
    for attr, value in new_special_ids.items():
        for view in views:
            if hasattr(view, attr):
                setattr(view, attr, value)
        if generation_config is not None and (hasattr(generation_config, attr) or value is not None):
            setattr(generation_config, attr, value)
    for attr, value in new_special_ids.items():
        if value is None:
            logger.info("The target tokenizer defines no %s: config.%s is now None.", attr[:-3], attr)
