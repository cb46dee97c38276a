"""Facts about a loaded causal LM that several modules need: its embedding matrices found by module identity (never by
parameter name), whether they are tied, its vocabulary shape, and its special-token ids kept in step with a
tokenizer."""

from __future__ import annotations

import torch

from tokswap.errors import TrainingError
from tokswap.utils import get_logger

logger = get_logger(__name__)


def embedding_parameters(model) -> list[torch.nn.Parameter]:
    """The parameters of the input embeddings and the output head, found by module identity.

    A tied weight is one parameter and is listed once. A bias of the output head is included.
    """
    modules = [model.get_input_embeddings(), model.get_output_embeddings()]
    params, seen = [], set()
    for module in modules:
        if module is None:
            continue
        for param in module.parameters():
            if id(param) not in seen:
                seen.add(id(param))
                params.append(param)
    return params


def freeze_embedding_rows(model, row_ids) -> list:
    """Keep rows `row_ids` of the input embeddings and the output head (and its bias) out of training.

    A gradient hook zeroes those rows' gradient, so Adam never moves them; AdamW's decoupled weight decay still
    shrinks them by `lr * weight_decay` per step. A tied weight is hooked once.

    Returns:
        `list`: the hook handles; `handle.remove()` lifts the freeze.
    """
    row_ids = torch.as_tensor(row_ids, dtype=torch.long)
    handles = []
    for param in embedding_parameters(model):
        rows = row_ids.to(param.device)
        if rows.numel() and int(rows.max()) >= param.shape[0]:
            raise TrainingError(f"Row {int(rows.max())} is outside an embedding matrix of {param.shape[0]} rows.")

        def zero_rows(grad, rows=rows):
            grad = grad.clone()
            grad[rows] = 0
            return grad

        handles.append(param.register_hook(zero_rows))
    return handles


def restrict_embedding_updates_to_batch(model) -> list:
    """Let a row of the input embeddings and the output head (and its bias) learn only from batches holding its token.

    Every softmax sends each vocabulary row a small gradient, and Adam normalizes it into a step of the full learning
    rate: rows whose tokens never occur (most of a new vocabulary) drift together along one shared direction, away from
    their init (measured on SmolLM2 given Qwen2.5: unseen new rows move as far as seen ones, cosine 0.84 to their
    mean shift). A forward pre-hook on the input embeddings records the batch's token ids; a gradient hook zeroes the
    other rows' gradient, so Adam moves them only by its momentum from batches that held them (and AdamW's decoupled
    weight decay). A tied weight is hooked once.

    Returns:
        `list`: the hook handles; `handle.remove()` lifts the restriction.
    """
    batch = {"ids": None}

    def record(_module, args):
        if args and torch.is_tensor(args[0]) and not torch.is_floating_point(args[0]):
            batch["ids"] = torch.unique(args[0])

    def keep_batch_rows(grad):
        if batch["ids"] is None:
            return grad
        ids = batch["ids"].to(grad.device)
        mask = torch.zeros(grad.shape[0], dtype=grad.dtype, device=grad.device)
        mask[ids[ids < grad.shape[0]]] = 1
        return grad * (mask[:, None] if grad.dim() == 2 else mask)

    handles = [model.get_input_embeddings().register_forward_pre_hook(record)]
    handles.extend(param.register_hook(keep_batch_rows) for param in embedding_parameters(model))
    return handles


def embedding_module_names(model) -> list[str]:
    """Qualified names of the input-embedding and output-head modules, found by identity (for PEFT's
    `modules_to_save`). GPT-NeoX gives `["gpt_neox.embed_in", "lm_head"]`, Llama `["model.embed_tokens", "lm_head"]`.
    """
    wanted = [model.get_input_embeddings(), model.get_output_embeddings()]
    by_id = {id(module): name for name, module in model.named_modules(remove_duplicate=False)}
    names = []
    for module in wanted:
        if module is None:
            continue
        name = by_id.get(id(module))
        if name is None:
            raise TrainingError(f"Could not locate the embedding module {type(module).__name__} inside the model.")
        if name not in names:
            names.append(name)
    return names


def embeddings_are_tied(model) -> bool:
    """True when the input embeddings and the output head share one weight tensor."""
    output = model.get_output_embeddings()
    return output is not None and weights_are_shared(model.get_input_embeddings().weight, output.weight)


def weights_are_shared(first: torch.Tensor, second: torch.Tensor) -> bool:
    """The same parameter, or two views of one storage (how some checkpoints come back tied)."""
    if first is second:
        return True
    return first.shape == second.shape and first.device == second.device and first.data_ptr() == second.data_ptr()


def freeze_all_but_embeddings(model) -> list[torch.nn.Parameter]:
    """Stage 1: make only the input embeddings and output head trainable. Returns the trainable parameters."""
    model.requires_grad_(False)
    params = embedding_parameters(model)
    for param in params:
        param.requires_grad_(True)
    return params


def _special_id_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def align_special_token_ids(model, tokenizer) -> dict:
    """Make the model's config and generation config use the tokenizer's bos/eos/pad ids.

    `transformers.Trainer` and `SFTTrainer` rewrite these ids silently when they differ from the tokenizer's;
    doing it here first, with the same rules, turns their rewrite into a no-op. A tokenizer without a pad token
    gets its eos token as pad (what `SFTTrainer` would pick).

    Returns:
        `dict`: the ids that changed, `{name: (old, new)}`.
    """
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    generation_config = getattr(model, "generation_config", None)
    changed = {}
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        token_id = getattr(tokenizer, name, None)
        if token_id is None:
            continue  # the tokenizer defines no such token: leave the model's value alone, as transformers does
        config_ids = _special_id_list(getattr(text_config, name, None))
        if token_id not in config_ids:
            changed[f"config.{name}"] = (getattr(text_config, name, None), token_id)
            setattr(text_config, name, token_id)
        if generation_config is not None:
            generation_ids = _special_id_list(getattr(generation_config, name, None))
            if token_id not in generation_ids:
                changed[f"generation_config.{name}"] = (getattr(generation_config, name, None), token_id)
                if name == "eos_token_id" and generation_ids:
                    # every listed eos id stops generation: keep the old ones
                    setattr(generation_config, name, [token_id, *[i for i in generation_ids if i is not None]])
                else:
                    setattr(generation_config, name, token_id)
    if changed:
        logger.info("Aligned the model's special-token ids with the tokenizer: %s", changed)
    return changed


def vocabulary_shape(model) -> tuple:
    """(config.vocab_size, input-embedding rows, output-head rows): what must not shrink during training."""
    text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    output = model.get_output_embeddings()
    return (
        getattr(text_config, "vocab_size", None),
        model.get_input_embeddings().weight.shape[0],
        None if output is None else output.weight.shape[0],
    )


def nonfinite_parameters(model) -> dict[str, int]:
    """`{parameter name: number of NaN/inf values}` for every parameter holding any (tied weights once)."""
    found = {}
    for name, param in model.named_parameters():
        if param.device.type == "meta" or not param.is_floating_point():
            continue  # offloaded (no data here) or integer (quantized) weights
        with torch.no_grad():
            if bool(torch.isfinite(param).all()):
                continue
            found[name] = int((~torch.isfinite(param)).sum())
    return found
