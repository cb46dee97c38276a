"""Draft models for speculative decoding: a small model given a big model's exact vocabulary.

transformers' assisted generation (`big.generate(..., assistant_model=draft)`) treats two models whose
`config.vocab_size` is equal as sharing a tokenizer and compares their token ids directly; otherwise it needs
both tokenizers and re-tokenizes the draft's text every step (Universal Assisted Generation). A draft made here
has the big model's tokenizer, exactly its `vocab_size` (padding rows included), its special token ids and its
generation config, so it plugs in with no bridging:

    from tokswap import make_draft

    swapper = make_draft("HuggingFaceTB/SmolLM2-135M", "Qwen/Qwen2.5-Coder-0.5B-Instruct")
    swapper.distill(dataset, teacher="Qwen/Qwen2.5-Coder-0.5B-Instruct")   # token-level, same vocabulary
    big.generate(**inputs, assistant_model=swapper.model, do_sample=False)

On a CPU, wrap generation in `small_batch_matmul(big, draft)`: it makes the big model's verification forward
(k + 1 tokens) cost about one token's forward, which PyTorch's own kernels do not. Where the CPU has bfloat16
instructions, load the draft in `torch.bfloat16` (the big model keeps its precision and decides every token).

`measure_speculative_decoding` reports what a draft buys: acceptance rate, tokens per big-model forward and
wall-clock tokens per second, against the big model alone, with a check that greedy outputs are identical.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Optional, Sequence, Union

import torch

from tokswap.errors import TokswapError
from tokswap.utils import get_logger

logger = get_logger(__name__)

# generation settings a draft inherits from the model it drafts for (they decide when generation stops)
_SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


class DraftError(TokswapError):
    """A draft model that cannot serve its big model (vocabulary sizes differ, ...)."""


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _big_model_config(big, **kwargs):
    """The big model's config, from a loaded model or a Hub id / folder (without loading its weights)."""
    if hasattr(big, "config"):
        return big.config
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(big, **kwargs)


def _big_generation_config(big, config, **kwargs):
    from transformers import GenerationConfig

    if hasattr(big, "generation_config") and big.generation_config is not None:
        return big.generation_config
    try:
        return GenerationConfig.from_pretrained(big, **kwargs)
    except OSError:  # no generation_config.json: the one transformers derives from the model config
        return GenerationConfig.from_model_config(config)


def adopt_generation_settings(draft, big_config, big_generation_config) -> None:
    """Copy the big model's special token ids and generation config onto `draft` (in place)."""
    import copy

    draft_config = _text_config(draft.config)
    for name in _SPECIAL_IDS:
        value = getattr(big_config, name, None)
        if value is not None:
            setattr(draft_config, name, value)
            if draft_config is not draft.config:
                setattr(draft.config, name, value)
    draft.generation_config = copy.deepcopy(big_generation_config)


def check_draft_compatible(model, assistant) -> None:
    """Raise `DraftError` unless `assistant` can draft for `model` without tokenizer bridging."""
    big, small = _text_config(model.config).vocab_size, _text_config(assistant.config).vocab_size
    if big != small:
        raise DraftError(
            f"The draft's vocab_size ({small}) differs from the model's ({big}): transformers would need both "
            "tokenizers (Universal Assisted Generation). Make the draft with tokswap.make_draft(small, big)."
        )


@contextmanager
def count_forwards(*models):
    """Count the forward calls of each model (a list of ints, updated while the context is open)."""
    counts = [0] * len(models)
    handles = []
    for index, model in enumerate(models):

        def hook(_module, _args, _output, index=index):
            counts[index] += 1

        handles.append(model.register_forward_hook(hook))
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()


def _generate(model, input_ids, max_new_tokens, **kwargs):
    attention_mask = torch.ones_like(input_ids)
    started = time.perf_counter()
    with torch.inference_mode():
        output = model.generate(
            input_ids, attention_mask=attention_mask, do_sample=False, max_new_tokens=max_new_tokens, **kwargs
        )
    return output[0, input_ids.shape[1] :], time.perf_counter() - started


def measure_speculative_decoding(
    model,
    tokenizer,
    prompts: Sequence[str],
    assistant=None,
    assistant_tokenizer=None,
    max_new_tokens: int = 64,
    num_assistant_tokens: Optional[int] = None,
    baseline: Optional[list] = None,
) -> dict:
    """Greedy generation with and without a draft: acceptance, tokens per forward, tokens per second, losslessness.

    Args:
        model: the big model; `tokenizer` its tokenizer.
        prompts: texts to continue (batch size 1 each, as assisted generation requires).
        assistant (*optional*): the draft. Without it only the big model alone is measured.
        assistant_tokenizer (*optional*): the draft's own tokenizer when its vocabulary differs (Universal
            Assisted Generation); not needed for a draft made by `make_draft`.
        num_assistant_tokens (`int`, *optional*): draft tokens per step; `None` keeps the draft's generation
            config (transformers' default: an adaptive schedule).
        baseline (`list`, *optional*): the `"outputs"` of an earlier call without `assistant` on the same
            prompts, reused instead of generating them again.

    Returns:
        `dict` with `new_tokens`, `seconds`, `tokens_per_second`, `target_forwards`, `tokens_per_forward` and,
        with an assistant, `draft_forwards`, `acceptance_rate` (accepted / proposed draft tokens: each big-model
        forward adds the accepted tokens plus one of its own, and each draft forward proposes one token; with
        UAG proposed tokens are the draft's own), `lossless` (outputs equal the big model's alone, token for token)
        and `mismatched_prompts`; `outputs` holds the generated ids.
    """
    if assistant is not None and assistant_tokenizer is None:
        check_draft_compatible(model, assistant)
    kwargs = {}
    if assistant is not None:
        kwargs["assistant_model"] = assistant
        if assistant_tokenizer is not None:
            kwargs.update(tokenizer=tokenizer, assistant_tokenizer=assistant_tokenizer)
        if num_assistant_tokens is not None:
            assistant.generation_config.num_assistant_tokens = num_assistant_tokens
            assistant.generation_config.num_assistant_tokens_schedule = "constant"
            # exactly n proposals per step: no early stop on the draft's own confidence
            assistant.generation_config.assistant_confidence_threshold = 0.0
    totals = dict(new_tokens=0, seconds=0.0, target_forwards=0, draft_forwards=0)
    outputs = []
    for prompt in prompts:
        input_ids = tokenizer(prompt, return_tensors="pt").input_ids.to(model.device)
        with count_forwards(model, *([assistant] if assistant is not None else [])) as counts:
            generated, seconds = _generate(model, input_ids, max_new_tokens, **kwargs)
        outputs.append(generated.tolist())
        totals["new_tokens"] += len(generated)
        totals["seconds"] += seconds
        totals["target_forwards"] += counts[0]
        totals["draft_forwards"] += counts[1] if assistant is not None else 0
    result = {
        **totals,
        "tokens_per_second": totals["new_tokens"] / totals["seconds"] if totals["seconds"] else float("nan"),
        "tokens_per_forward": totals["new_tokens"] / max(totals["target_forwards"], 1),
        "outputs": outputs,
    }
    if assistant is not None:
        accepted = totals["new_tokens"] - totals["target_forwards"]
        result["acceptance_rate"] = accepted / totals["draft_forwards"] if totals["draft_forwards"] else float("nan")
        if baseline is None:
            baseline = measure_speculative_decoding(model, tokenizer, prompts, max_new_tokens=max_new_tokens)["outputs"]
        mismatched = [i for i, (a, b) in enumerate(zip(outputs, baseline)) if a != b]
        result.update(lossless=not mismatched, mismatched_prompts=mismatched)
    else:
        del result["draft_forwards"]
    return result


def load_draft_pair(
    big: Union[str, os.PathLike],
    draft: Union[str, os.PathLike],
    draft_dtype: Optional[torch.dtype] = None,
    **model_kwargs,
):
    """(big model, its tokenizer, draft model) loaded with plain transformers, checked to share the vocabulary.

    `draft_dtype` loads the draft alone in another precision: on a CPU with bfloat16 instructions (avx512_bf16, AMX)
    a `torch.bfloat16` draft halves the weights each proposal reads, at no cost in exactness (the big model, in
    its own precision, still decides every token).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(big, **model_kwargs).eval()
    tokenizer = AutoTokenizer.from_pretrained(big)
    draft_kwargs = {**model_kwargs, **({"dtype": draft_dtype} if draft_dtype is not None else {})}
    assistant = AutoModelForCausalLM.from_pretrained(draft, **draft_kwargs).eval()
    check_draft_compatible(model, assistant)
    return model, tokenizer, assistant


def greedy_agreement(model, assistant, tokenizer, texts: Sequence[str], max_length: int = 256) -> dict:
    """How often the draft's next-token argmax equals the big model's, teacher-forced on `texts`.

    Under greedy speculative decoding a proposed token is accepted exactly when it is the big model's argmax, so
    this agreement is a cheap proxy for the acceptance rate: one forward of each model per text instead of a
    generation loop. It is what to compare when choosing distillation settings (divergence, temperature).

    Args:
        model: the big model; `tokenizer` its tokenizer (the draft shares it).
        assistant: the draft (same vocabulary, checked).
        texts: held-out texts, each cut to `max_length` tokens.

    Returns:
        `dict` with `agreement` (fraction of positions whose argmaxes match), `positions`, and
        `expected_accepted_run` (mean number of consecutive agreeing positions from each position, capped at 8:
        the accepted-prefix length a draft of 8 tokens would reach if errors were independent of the prefix).
    """
    check_draft_compatible(model, assistant)
    matches = []
    for text in texts:
        ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_length).input_ids.to(model.device)
        if ids.shape[1] < 2:
            continue
        with torch.inference_mode():
            big_next = model(ids).logits[0, :-1].argmax(-1)
            draft_next = assistant(ids).logits[0, :-1].argmax(-1)
        matches.append((big_next == draft_next).cpu())
    if not matches:
        raise DraftError("greedy_agreement needs at least one text of two or more tokens.")
    flat = torch.cat(matches).float()
    agreement = float(flat.mean())
    return {
        "agreement": agreement,
        "positions": int(flat.numel()),
        "expected_accepted_run": sum(agreement**k for k in range(1, 9)),
    }


def decode_step_seconds(model, tokenizer, prompt: str, steps: int = 16, warmup: int = 2, num_tokens: int = 1) -> float:
    """Median seconds of one cached forward over `num_tokens` new tokens at batch size 1.

    With `num_tokens=1` it is the cost of a draft proposal or of a plain decoding step; with `k + 1` it is the cost
    of the big model verifying `k` draft tokens in assisted generation (one forward over the last accepted token
    and the `k` proposals), which on a CPU is not the cost of one token.
    """
    import inspect

    if num_tokens < 1:
        raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
    ids = tokenizer(prompt, return_tensors="pt").input_ids.to(model.device)
    # transformers 5 names the KV cache `cache`; earlier versions `past_key_values`
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    times = []
    with torch.inference_mode():
        output = model(ids, use_cache=True)
        past, token = getattr(output, name), output.logits[:, -1:].argmax(-1)
        for step in range(warmup + steps):
            started = time.perf_counter()
            output = model(token.repeat(1, num_tokens), use_cache=True, **{name: past})
            elapsed = time.perf_counter() - started
            past, token = getattr(output, name), output.logits[:, -1:].argmax(-1)
            if step >= warmup:
                times.append(elapsed)
    return float(sorted(times)[len(times) // 2])


def expected_speedup(acceptance: float, draft_tokens: int, cost_ratio: float, verify_ratio: float = 1.0) -> float:
    """Speed-up over the big model alone that speculative decoding can reach, per Leviathan et al. (2023):
    (1 - a^(k+1)) / ((1 - a) (k c + v)) for per-token acceptance a, k draft tokens per step, c = the draft's
    forward time / the big model's, and v = the big model's forward over k + 1 tokens (verification) / its
    one-token forward. The paper takes v = 1 (verification is free on a parallel device); on a CPU it is not,
    so measure it (`decode_step_seconds(..., num_tokens=k + 1)`). It says how cheap a draft must be before
    acceptance can pay."""
    if not 0.0 <= acceptance <= 1.0:
        raise ValueError(f"acceptance must be in [0, 1], got {acceptance}")
    if verify_ratio <= 0:
        raise ValueError(f"verify_ratio must be > 0, got {verify_ratio}")
    cost = draft_tokens * cost_ratio + verify_ratio
    if acceptance == 1.0:  # every proposal accepted: k + 1 tokens per step
        return (draft_tokens + 1) / cost
    return (1 - acceptance ** (draft_tokens + 1)) / ((1 - acceptance) * cost)


class FrequencyRankedHead(torch.nn.Module):
    """An output layer that scores only the tokens in `keep_ids` and gives every other token `-inf`.

    Logits keep the full vocabulary width, so assisted generation compares token ids as before; only the matmul
    shrinks. Built by `frequency_ranked_head`, not saved: it lives while the context is open.
    """

    def __init__(self, head: torch.nn.Module, keep_ids: torch.Tensor, vocab_size: int):
        super().__init__()
        weight = head.weight.detach()
        self.vocab_size = vocab_size
        self.register_buffer("keep_ids", keep_ids.to(weight.device), persistent=False)
        self.register_buffer("weight", weight.index_select(0, self.keep_ids).clone(), persistent=False)
        bias = getattr(head, "bias", None)
        self.register_buffer(
            "bias", None if bias is None else bias.detach().index_select(0, self.keep_ids).clone(), persistent=False
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        scores = torch.nn.functional.linear(hidden_states, self.weight, self.bias)
        logits = scores.new_full((*scores.shape[:-1], self.vocab_size), float("-inf"))
        return logits.index_copy_(-1, self.keep_ids, scores)


def rank_tokens_by_frequency(tokenizer, texts: Sequence[str], keep: int) -> tuple:
    """The `keep` most frequent token ids of `texts` (ties by id) plus every special id, and the share of the
    texts' tokens they cover."""
    if keep < 1:
        raise DraftError(f"keep must be a positive number of tokens, got {keep}.")
    counts = torch.zeros(len(tokenizer), dtype=torch.long)
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        counts += torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=len(counts))[: len(counts)]
    total = int(counts.sum())
    if total == 0:
        raise DraftError("rank_tokens_by_frequency needs texts with at least one token.")
    order = torch.argsort(counts, descending=True, stable=True)[:keep]
    keep_ids = torch.unique(torch.cat([order, torch.tensor(tokenizer.all_special_ids, dtype=torch.long)]))
    return keep_ids, float(counts[keep_ids[keep_ids < len(counts)]].sum()) / total


@contextmanager
def frequency_ranked_head(draft, keep_ids: torch.Tensor):
    """Let `draft` score only `keep_ids` while the context is open (FR-Spec, Zhao et al., 2025).

    A draft given a big model's vocabulary pays for its whole output layer at every proposal: for SmolLM2-135M
    with Qwen2.5's 151,936 rows the head is about as costly as the 30 layers below it. Restricting the draft's
    proposals to the most frequent tokens (`rank_tokens_by_frequency`) cuts that cost; a token outside the set is
    never proposed, so it can only be rejected, never wrongly accepted: the big model still decides every token
    and greedy outputs are unchanged. The draft's own head is restored on exit (the trimmed head is not saved).

        keep_ids, coverage = rank_tokens_by_frequency(tokenizer, code_texts, keep=32768)
        with frequency_ranked_head(draft, keep_ids):
            big.generate(**inputs, assistant_model=draft, do_sample=False)
    """
    head = draft.get_output_embeddings()
    vocab_size = head.weight.shape[0]
    keep_ids = torch.as_tensor(keep_ids, dtype=torch.long)
    if keep_ids.numel() == 0 or int(keep_ids.min()) < 0 or int(keep_ids.max()) >= vocab_size:
        raise DraftError(f"keep_ids must be non-empty token ids below the draft's vocabulary size ({vocab_size}).")
    draft.set_output_embeddings(FrequencyRankedHead(head, keep_ids, vocab_size))
    try:
        yield draft
    finally:
        draft.set_output_embeddings(head)


# Up to this many rows, `small_batch_matmul` computes a linear layer as `(W @ x^T)^T`: the rows of one decoding or
# verification step (1 + draft tokens) at batch size 1.
SMALL_BATCH_ROWS = 8


def _linear_of_few_rows(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """`F.linear(x, weight, bias)` for an `x` of few rows, as one matrix product with the rows as its columns."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.mm(weight, flat.T).T
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


@contextmanager
def small_batch_matmul(*models, max_rows: int = SMALL_BATCH_ROWS):
    """Compute the linear layers of `models` as `(W @ x^T)^T` for inputs of at most `max_rows` rows, while the
    context is open (CPU inference).

    Why: on a CPU, PyTorch's `linear` over 2 to 8 rows (a big model verifying 1 to 7 draft tokens) runs a
    matrix-matrix kernel that can cost 2-3x its one-row (matrix-vector) call, so verification costs several
    forwards instead of one and speculative decoding cannot pay (`bench/bench_draft.py` measures it). The same
    product with the few rows as the columns of the right-hand side runs at about the one-row cost. Results equal
    `linear`'s up to float rounding (the sums are taken in another order); inputs with more rows, on another
    device, or that need gradients take the usual path. Every `nn.Linear` (the output layer included) and a draft's
    `FrequencyRankedHead` are patched; their own `forward` is restored on exit.

        with small_batch_matmul(big, draft):
            big.generate(**inputs, assistant_model=draft, do_sample=False)
    """
    if max_rows < 1:
        raise DraftError(f"max_rows must be >= 1, got {max_rows}.")

    def patched(module):
        def forward(x):
            few = x.dim() >= 2 and x.numel() <= max_rows * x.shape[-1]
            if few and x.device.type == "cpu" and not (torch.is_grad_enabled() and module.weight.requires_grad):
                out = _linear_of_few_rows(x, module.weight, module.bias)
                if isinstance(module, FrequencyRankedHead):
                    logits = out.new_full((*out.shape[:-1], module.vocab_size), float("-inf"))
                    return logits.index_copy_(-1, module.keep_ids, out)
                return out
            return type(module).forward(module, x)

        return forward

    touched = []
    try:
        for model in models:
            for module in model.modules():
                if isinstance(module, (torch.nn.Linear, FrequencyRankedHead)) and "forward" not in vars(module):
                    module.forward = patched(module)
                    touched.append(module)
        yield models[0] if len(models) == 1 else models
    finally:
        for module in touched:
            del module.forward


# written beside a draft by `tokswap draft --frequency-ranked K`: the token ids its head may be restricted to
FREQUENCY_RANKED_FILE = "frequency_ranked_tokens.json"


def save_frequency_ranked_tokens(folder: Union[str, os.PathLike], keep_ids: torch.Tensor, coverage: float) -> None:
    """Write `keep_ids` (from `rank_tokens_by_frequency`) into a draft's folder, atomically."""
    import json
    from pathlib import Path

    from tokswap.utils import atomic_output_file

    record = {"token_ids": [int(i) for i in keep_ids], "coverage_of_ranking_text": round(coverage, 6)}
    with atomic_output_file(Path(folder) / FREQUENCY_RANKED_FILE, "w") as handle:
        json.dump(record, handle)


def load_frequency_ranked_tokens(folder: Union[str, os.PathLike]) -> torch.Tensor:
    """The token ids saved by `save_frequency_ranked_tokens`, for `frequency_ranked_head`."""
    import json
    from pathlib import Path

    path = Path(folder) / FREQUENCY_RANKED_FILE
    if not path.is_file():
        raise DraftError(
            f"{folder} has no {FREQUENCY_RANKED_FILE}: make the draft with `tokswap draft --frequency-ranked K`."
        )
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))["token_ids"]
    except (ValueError, KeyError, TypeError) as err:
        raise DraftError(f"{path} is not a token list written by tokswap ({err}); make the draft again.") from None
    return torch.tensor(ids, dtype=torch.long)
