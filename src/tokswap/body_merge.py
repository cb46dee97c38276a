"""Move a trained swapped model's decoder weights part of the way back to the original model's.

Recovery training after a swap updates every decoder weight (stage 2) to fit the new vocabulary on a few hundred
steps of text, and some of what the original model knew goes with it. Interpolating the decoder weights between the
trained model and the original (WiSE-FT, Wortsman et al., 2022; a linear merge in mergekit's terms) keeps part of the
adaptation and part of the original. The embedding rows are not interpolated: after the swap they index another
vocabulary, so the trained model's rows are kept as they are.
"""

from __future__ import annotations

import math

import torch

from tokswap.errors import TokswapError


class BodyMergeError(TokswapError):
    """Raised when the two models' decoders cannot be merged."""


def _embedding_pointers(model) -> set:
    """Storage addresses of the input and output embedding matrices (tied or not)."""
    pointers = {model.get_input_embeddings().weight.data_ptr()}
    output = model.get_output_embeddings()
    if output is not None:
        pointers.add(output.weight.data_ptr())
    return pointers


def merge_body_with_original(model, original, original_weight: float) -> int:
    """Set every decoder weight of `model` to `(1 - original_weight) * model + original_weight * original`, in place.

    Args:
        model (`PreTrainedModel`): the swapped (and trained) causal LM.
        original (`PreTrainedModel`): the model before the swap, same architecture; it is only read.
        original_weight (`float`): the original's share, in [0, 1]; 0 leaves `model` as it is.

    Returns:
        `int`: the number of weight tensors merged.

    Raises:
        [`BodyMergeError`]: a decoder weight of `model` is missing from `original` or has another shape, or a merged
        weight is not finite.
    """
    if not (0.0 <= original_weight <= 1.0 and math.isfinite(original_weight)):
        raise BodyMergeError(f"original_weight must be in [0, 1] (got {original_weight}).")
    skipped = _embedding_pointers(model)
    reference = dict(original.named_parameters())
    merged = 0
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if weight.data_ptr() in skipped:
                continue
            source = reference.get(name)
            if source is None or source.shape != weight.shape:
                found = "missing" if source is None else f"of shape {tuple(source.shape)}"
                raise BodyMergeError(
                    f"{name} {tuple(weight.shape)} is {found} in the original model: merge a model with the one it "
                    f"was swapped from."
                )
            weight.lerp_(source.to(device=weight.device, dtype=weight.dtype), original_weight)
            if not torch.isfinite(weight).all():
                raise BodyMergeError(f"{name} is not finite after the merge: check both models' weights.")
            merged += 1
    return merged
