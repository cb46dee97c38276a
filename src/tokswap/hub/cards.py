"""Model cards for swapped models and alignment repos, rendered with huggingface_hub's `ModelCard`.

The templates live in `hub_cards/` at the top of the repository and ship inside the package as
`tokswap/_data/hub_cards/` (Jinja2, as `ModelCard.from_template` expects).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Optional, Union

from tokswap.utils import get_logger

logger = get_logger(__name__)

MODEL_CARD_TEMPLATE = "model_card.md"
ALIGNMENT_CARD_TEMPLATE = "alignment_card.md"
CARD_TAGS = ["tokswap", "tokalign", "tokenizer-transfer"]
ALIGNMENT_CARD_TAGS = ["tokswap", "tokalign", "token-alignment", "tokenizer-transfer"]
# The Hub's model tree knows adapter / merge / quantized / finetune. A swapped vocabulary keeps every
# transformer weight and rebuilds (then trains) embeddings: a derived checkpoint, i.e. "finetune".
BASE_MODEL_RELATION = "finetune"

CITATION = """@inproceedings{li-etal-2025-tokalign,
    title = "{T}ok{A}lign: Efficient Vocabulary Adaptation via Token Alignment",
    author = "Li, Chong and Zhang, Jiajun and Zong, Chengqing",
    booktitle = "Proceedings of the 63rd Annual Meeting of the Association for Computational Linguistics (Volume 1: Long Papers)",
    year = "2025",
    publisher = "Association for Computational Linguistics",
    eprint = "2506.03523",
    archivePrefix = "arXiv",
}"""

# Readable names for the metrics an alignment records.
_METRIC_LABELS = {
    "bleu1": "BLEU-1",
    "bleu_1": "BLEU-1",
    "semantic_similarity": "semantic similarity (BERTScore-like)",
    "bertscore": "BERTScore",
    "coverage": "coverage",
    "coverage_trained_target": "coverage (target tokens with a GloVe vector)",
    "coverage_trained_source": "coverage (source tokens with a GloVe vector)",
}
# The alignment settings a card lists (all of them stay in alignment_config.json).
_HYPERPARAMETER_KEYS = (
    "dim",
    "window",
    "min_count",
    "iterations",
    "x_max",
    "alpha",
    "method",
    "num_anchors",
    "hubness_correction",
    "corpus_bytes",
)
_INIT_METHOD_HELP = {
    "tokalign": "each new token starts from the source token TokAlign aligned it with",
    "mean": "each new token starts from the mean of the source tokens its text splits into",
    "random": "new rows initialized at random",
}


def hub_cards_dir():
    """The folder of card templates inside the installed package (`tokswap/_data/hub_cards`)."""
    return resources.files("tokswap") / "_data" / "hub_cards"


def _template(name: str) -> str:
    return (hub_cards_dir() / name).read_text(encoding="utf-8")


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
    return str(value)


def _metric_rows(metrics: dict) -> list[tuple[str, str]]:
    """Known metrics first (BLEU-1, similarity, coverage), then the remaining scalars."""
    rows, seen = [], set()
    for key, label in _METRIC_LABELS.items():
        if key in metrics and label not in seen and isinstance(metrics[key], (int, float)):
            rows.append((label, _fmt(metrics[key])))
            seen.add(label)
    for key, value in sorted(metrics.items()):
        if key in _METRIC_LABELS or isinstance(value, (dict, list)) or value is None:
            continue
        rows.append((key.replace("_", " "), _fmt(value)))
    return rows


def _row_source_rows(config: dict) -> list[tuple[str, str]]:
    counts = config.get("row_source_counts") or {}
    return [(name, _fmt(count)) for name, count in counts.items() if count]


def _human_count(n: Optional[int]) -> str:
    if not n:
        return "?"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _public_name(name: Optional[str]) -> Optional[str]:
    """A name fit for a public card: a Hub id as is, a local path reduced to its last component."""
    if not name or not isinstance(name, str):
        return name
    if os.path.isabs(name) or name.startswith(("~", "./", "../")):
        return os.path.basename(name.rstrip("/\\")) or name
    return name


def _hub_id_of_asset(name: Optional[str]) -> Optional[str]:
    """tokswap asset names (`smollm2-135m`) stand for a Hub model; the card's `base_model` names that model."""
    if not name or not isinstance(name, str) or "/" in name or os.sep in name:
        return name
    from tokswap.offline.assets import ASSET_HUB_IDS

    return ASSET_HUB_IDS.get(name.lower(), name)


def _is_hub_id(name: Optional[str]) -> bool:
    """`org/name` that is not a local path: something the Hub's `base_model` can point to."""
    if not name or not isinstance(name, str):
        return False
    if os.path.isabs(name) or name.startswith((".", "~")) or os.path.exists(name):
        return False
    parts = name.split("/")
    return len(parts) == 2 and all(parts)


# ---------------------------------------------------------------------------------------- alignment card
def render_alignment_card(alignment, repo_id: Optional[str] = None, alignment_sha256: Optional[str] = None):
    """The `README.md` of an alignment repo as a `huggingface_hub.ModelCard`.

    Its YAML metadata records both vocabulary hashes and the sha256 of `alignment.safetensors`
    (key `tokswap`), which `tokswap.hub.download_alignment` checks.
    """
    from huggingface_hub import ModelCard, ModelCardData

    from tokswap.hub.naming import alignment_index_repo_id

    config = alignment.config
    source, target = alignment.source_fingerprint, alignment.target_fingerprint
    corpus = config.get("corpus")
    languages = None
    if isinstance(corpus, dict):
        languages = corpus.get("languages") or corpus.get("language")
    card_data = ModelCardData(
        library_name="tokswap",
        license="apache-2.0",
        tags=list(ALIGNMENT_CARD_TAGS),
        language=languages,
        tokswap={
            "kind": "alignment",
            "format_version": config.get("format_version", 1),
            "source_tokenizer": _public_name(source.get("name_or_path")),
            "target_tokenizer": _public_name(target.get("name_or_path")),
            "source_vocab_hash": source.get("vocab_hash"),
            "target_vocab_hash": target.get("vocab_hash"),
            "alignment_sha256": alignment_sha256,
        },
    )
    hyperparameters = config.get("hyperparameters") or {}
    if not isinstance(hyperparameters, dict):
        hyperparameters = {"settings": hyperparameters}
    elif any(key in hyperparameters for key in _HYPERPARAMETER_KEYS):
        hyperparameters = {key: hyperparameters[key] for key in _HYPERPARAMETER_KEYS if key in hyperparameters}
    return ModelCard.from_template(
        card_data,
        template_str=_template(ALIGNMENT_CARD_TEMPLATE),
        repo_id=repo_id or "<repo id>",
        index_repo=alignment_index_repo_id(),
        source_name=_public_name(source.get("name_or_path")) or "?",
        target_name=_public_name(target.get("name_or_path")) or "?",
        source_vocab_size=_fmt(source.get("vocab_size", "?")),
        target_vocab_size=_fmt(target.get("vocab_size", "?")),
        source_vocab_hash=source.get("vocab_hash", "?"),
        target_vocab_hash=target.get("vocab_hash", "?"),
        num_target_rows=_fmt(alignment.num_target_rows),
        row_source_counts=_row_source_rows(config)
        or [(k, _fmt(v)) for k, v in alignment.counts_by_row_source().items() if v],
        metrics=_metric_rows(config.get("metrics") or {}),
        corpus=_fmt(corpus) if corpus else None,
        hyperparameters=[(k, _fmt(v)) for k, v in hyperparameters.items()],
        alignment_sha256=alignment_sha256 or "?",
        citation=CITATION,
    )


# ---------------------------------------------------------------------------------------- model card
def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _first(mapping: dict, *keys, default=None):
    for key in keys:
        value = mapping.get(key)
        if value not in (None, "", {}, []):
            return value
    return default


# Recipe fields worth a reader's attention, in the order they are shown.
_RECIPE_KEYS = (
    "stage1_max_steps",
    "stage1_tokens",
    "stage1_learning_rate",
    "stage2",
    "stage2_max_steps",
    "stage2_tokens",
    "stage2_learning_rate",
    "merge_original_weight",
    "lora_r",
    "max_steps",
    "num_train_epochs",
    "learning_rate",
    "max_length",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "packing",
    "alpha",
    "kl_weight",
    "ce_weight",
    "temperature",
    "tokens",
    "train_tokens",
)


def _describe_run(run: Any, label: str) -> str:
    """One line per training run: what kind, its budget and learning rates, the teacher if any."""
    if not isinstance(run, dict):
        return f"{label}: {run}"
    kind = str(run.get("kind") or label)
    kind = {"adapt_vocabulary": "two-stage vocabulary adaptation", "distill": "token-level distillation"}.get(
        kind, kind
    )
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    settings = {key: config[key] for key in _RECIPE_KEYS if config.get(key) not in (None, "", [])}
    if config.get("stage2") != "lora":
        settings.pop("lora_r", None)
    if not settings.get("merge_original_weight"):  # 0: the trained weights were kept
        settings.pop("merge_original_weight", None)
    extras = {k: v for k, v in run.items() if k not in ("kind", "config") and not isinstance(v, (dict, list))}
    text = kind
    if "teacher" in extras:
        text += f" from teacher `{extras.pop('teacher')}`"
    details = {**settings, **extras}
    if not config and not extras:
        details = {k: v for k, v in run.items() if k != "kind" and not isinstance(v, (dict, list))}
    return f"{text}: {_fmt(details)}" if details else text


def _training_lines(record: dict) -> list[str]:
    """Readable lines for the training recipe and budget recorded by the training/distillation steps."""
    lines = []
    for key in ("training", "train", "stages", "distillation", "distill"):
        section = record.get(key)
        if not section:
            continue
        label = "distillation" if key.startswith("distill") else "training"
        if isinstance(section, list):
            lines.extend(_describe_run(run, label) for run in section)
        elif isinstance(section, dict):
            stages = section.get("stages")
            rest = {k: v for k, v in section.items() if k != "stages" and not isinstance(v, (dict, list))}
            if rest:
                lines.append(f"{label}: {_fmt(rest)}")
            if isinstance(stages, list):
                for i, stage in enumerate(stages, 1):
                    lines.append(f"{label} stage {i}: {_fmt(stage) if isinstance(stage, dict) else stage}")
            elif isinstance(stages, dict):
                for name, stage in stages.items():
                    lines.append(f"{label} stage {name}: {_fmt(stage) if isinstance(stage, dict) else stage}")
            for k, v in section.items():
                if k != "stages" and isinstance(v, dict):
                    lines.append(f"{label} {k}: {_fmt(v)}")
        else:
            lines.append(f"{label}: {section}")
    return lines


def _evaluation_table(record: dict) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Rows `measure -> values per column` from an evaluation record.

    Accepts `{"evaluation": {"before": {...}, "after": {...}}}` (columns before/after, or any stage
    names) or a flat `{"evaluation": {"bits_per_byte": x, ...}}`.
    """
    evaluation = _first(record, "evaluation", "eval", "metrics", default={})
    if not isinstance(evaluation, dict) or not evaluation:
        return [], []
    if all(isinstance(v, dict) for v in evaluation.values()):
        columns = list(evaluation)
        measures = []
        for column in columns:
            for key, value in evaluation[column].items():
                if isinstance(value, (int, float)) and key not in measures:
                    measures.append(key)
        rows = [
            (m.replace("_", " "), [_fmt(evaluation[c][m]) if m in evaluation[c] else "–" for c in columns])
            for m in measures
        ]
        return columns, rows
    rows = [(k.replace("_", " "), [_fmt(v)]) for k, v in evaluation.items() if isinstance(v, (int, float))]
    return ["value"], rows


def _draft_rows(speculative: dict) -> list[tuple]:
    """(prompts, draft tokens, acceptance, tokens per forward, speed-up) rows from
    `swap_record["speculative_decoding"] = {kind: measure_speculative_decoding(...) + "speedup", ...}`."""
    rows = []
    for kind, result in speculative.items():
        if not isinstance(result, dict) or "acceptance_rate" not in result:
            continue
        speedup = result.get("speedup")
        rows.append(
            (
                kind,
                _fmt(result.get("num_assistant_tokens", "auto")),
                f"{100 * result['acceptance_rate']:.1f}%",
                f"{result.get('tokens_per_forward', float('nan')):.2f}",
                f"{speedup:.2f}x" if isinstance(speedup, (int, float)) else "–",
            )
        )
    return rows


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _as_list(value) -> Optional[list]:
    if value in (None, "", []):
        return None
    return list(value) if isinstance(value, (list, tuple)) else [value]


def render_model_card(
    repo_id: str,
    model_config: dict,
    tokswap_config: dict,
    alignment_config: Optional[dict] = None,
    swap_record: Optional[dict] = None,
    source_card: Optional[dict] = None,
    alignment_hub: Optional[dict] = None,
):
    """The `README.md` of a swapped model as a `huggingface_hub.ModelCard`.

    Args:
        repo_id: where the model is pushed (used in the usage snippet).
        model_config: the model's `config.json` as a dict.
        tokswap_config: `tokswap_config.json` written by `TokenizerSwapper.save_pretrained`.
        alignment_config: `alignment/alignment_config.json` (fingerprints and metrics).
        swap_record: training / distillation / evaluation record (defaults to the one in `tokswap_config`).
        source_card: the source model's card metadata, whose license, language and datasets carry over.
        alignment_hub: `{"repo_id", "revision"}` when the alignment came from the Hub.
    """
    from huggingface_hub import ModelCard

    alignment_config = alignment_config or {}
    source_card = source_card or {}
    # `tokswap_config.json` *is* the swapper's record; `swap_record` adds to it (e.g. evaluation results).
    record = {**tokswap_config, **(tokswap_config.get("swap_record") or {}), **(swap_record or {})}
    facts = _SwapFacts.gather(tokswap_config, record, alignment_config, alignment_hub)
    card_data = _model_card_data(facts, record, source_card)
    columns, evaluation = _evaluation_table(record)
    architectures = model_config.get("architectures") or [model_config.get("model_type", "?")]
    num_parameters = record.get("num_parameters") or tokswap_config.get("num_parameters")
    training = _training_lines(record)
    draft_for = _hub_id_of_asset(record.get("draft_for")) if record.get("draft_for") else None
    speculative = _dict(record.get("speculative_decoding"))
    return ModelCard.from_template(
        card_data,
        template_str=_template(MODEL_CARD_TEMPLATE),
        repo_id=repo_id,
        model_title=repo_id.split("/")[-1],
        base_model_name=_public_name(facts.base_model) or "?",
        source_tokenizer=facts.source_tokenizer,
        target_tokenizer=facts.target_tokenizer,
        source_vocab_size=_fmt(facts.source_fp.get("vocab_size", "?")),
        target_vocab_size=_fmt(facts.target_fp.get("vocab_size", model_config.get("vocab_size", "?"))),
        init_method=facts.init_method,
        init_method_help=_INIT_METHOD_HELP.get(str(facts.init_method)),
        new_word_fit=_fmt(_dict(record.get("new_word_fit")).get("num_words")) if record.get("new_word_fit") else None,
        output_row_fit=_fmt(_dict(record.get("output_row_fit")).get("rows_fitted"))
        if record.get("output_row_fit")
        else None,
        kept_source_words=_fmt(_dict(record.get("kept_source_words")).get("words"))
        if record.get("kept_source_words")
        else None,
        alignment_where=_alignment_where(facts.alignment_hub, alignment_config),
        architecture=architectures[0],
        num_parameters=_human_count(num_parameters) if num_parameters else "?",
        alignment_metrics=_metric_rows(facts.alignment_metrics),
        row_source_counts=_row_source_rows(alignment_config) or _row_source_rows(facts.alignment_record),
        trained=bool(training),
        training=training,
        evaluation_columns=columns,
        evaluation=evaluation,
        draft_for=_public_name(draft_for),
        draft_for_url=_hub_url(draft_for) if _is_hub_id(draft_for) else "#",
        draft_measurements=_draft_rows(speculative),
        draft_measured_on=speculative.get("measured_on"),
        citation=CITATION,
    )


@dataclass
class _SwapFacts:
    """What a swapped model's card says about its swap, gathered from its records (newest first)."""

    base_model: Optional[str]
    source_tokenizer: str
    target_tokenizer: str
    source_fp: dict
    target_fp: dict
    init_method: str
    alignment_record: dict
    alignment_hub: Optional[dict]
    alignment_metrics: dict

    @classmethod
    def gather(cls, tokswap_config: dict, record: dict, alignment_config: dict, alignment_hub) -> _SwapFacts:
        source_fp = alignment_config.get("source_tokenizer") or _dict(record.get("source_tokenizer"))
        target_fp = alignment_config.get("target_tokenizer") or _dict(record.get("target_tokenizer"))
        alignment_record = _dict(record.get("alignment"))
        base_model = _hub_id_of_asset(
            _first(tokswap_config, "source_model_id", "source_model", "base_model", default=None)
        )
        source_tokenizer = _first(tokswap_config, "source_tokenizer", "source_tokenizer_id", default=None)
        target_tokenizer = _first(tokswap_config, "target_tokenizer_id", "target_tokenizer", default=None)
        if isinstance(source_tokenizer, dict):
            source_tokenizer = source_tokenizer.get("name_or_path")
        if isinstance(target_tokenizer, dict):
            target_tokenizer = target_tokenizer.get("name_or_path")
        if not alignment_hub and alignment_record.get("origin") == "prebuilt" and alignment_record.get("repo_id"):
            alignment_hub = {
                "repo_id": alignment_record["repo_id"],
                "revision": alignment_record.get("revision", "main"),
            }
        return cls(
            base_model=base_model,
            source_tokenizer=_public_name(source_tokenizer or source_fp.get("name_or_path") or base_model or "?"),
            target_tokenizer=_public_name(target_tokenizer or target_fp.get("name_or_path") or "?"),
            source_fp=source_fp,
            target_fp=target_fp,
            init_method=_first(tokswap_config, "init_method", default=None) or record.get("init_method") or "tokalign",
            alignment_record=alignment_record,
            alignment_hub=alignment_hub or tokswap_config.get("alignment_hub") or alignment_config.get("hub"),
            alignment_metrics=alignment_config.get("metrics") or alignment_record.get("metrics") or {},
        )


def _model_card_data(facts: _SwapFacts, record: dict, source_card: dict):
    """The card's YAML metadata: what the Hub reads (base model, license, languages, datasets, tokswap's block)."""
    from huggingface_hub import ModelCardData

    datasets = _as_list(_first(record, "datasets", "dataset", default=None)) or _as_list(source_card.get("datasets"))
    datasets = [
        d for d in (datasets or []) if _is_hub_id(d) or (isinstance(d, str) and "/" not in d and not os.path.exists(d))
    ]
    card_data = ModelCardData(
        base_model=facts.base_model if _is_hub_id(facts.base_model) else None,
        library_name="transformers",
        pipeline_tag="text-generation",
        license=source_card.get("license"),
        license_name=source_card.get("license_name"),
        license_link=source_card.get("license_link"),
        language=source_card.get("language"),
        datasets=datasets or None,
        tags=list(CARD_TAGS),
        tokswap={
            "source_model": _public_name(facts.base_model),
            "source_tokenizer": facts.source_tokenizer,
            "target_tokenizer": facts.target_tokenizer,
            "init_method": facts.init_method,
            "source_vocab_hash": facts.source_fp.get("vocab_hash"),
            "target_vocab_hash": facts.target_fp.get("vocab_hash"),
            "alignment_repo": (facts.alignment_hub or {}).get("repo_id"),
        },
    )
    if card_data.base_model:
        card_data.base_model_relation = BASE_MODEL_RELATION
    return card_data


def _alignment_where(alignment_hub: Optional[dict], alignment_config: dict) -> str:
    if alignment_hub and alignment_hub.get("repo_id"):
        return (
            f"[`{alignment_hub['repo_id']}`]({_hub_url(alignment_hub['repo_id'])}) "
            f"(revision `{alignment_hub.get('revision', 'main')}`), copied in `alignment/`"
        )
    if alignment_config:
        return "computed for this model, saved in `alignment/`"
    return "not included"


def _hub_url(repo_id: str) -> str:
    from huggingface_hub import constants

    return f"{constants.ENDPOINT.rstrip('/')}/{repo_id}"


def render_model_card_from_folder(
    folder: Union[str, os.PathLike],
    repo_id: str,
    swap_record: Optional[dict] = None,
    source_card: Optional[dict] = None,
    alignment_hub: Optional[dict] = None,
):
    """Render the model card of a saved swapped model from the files in its folder.

    Reads `config.json`, `tokswap_config.json` and `alignment/alignment_config.json`; counts the
    parameters from the safetensors headers (no weights are loaded).
    """
    folder = Path(folder)
    tokswap_config = _read_json(folder / "tokswap_config.json")
    alignment_config = _read_json(folder / "alignment" / "alignment_config.json")
    record = dict(swap_record or {})
    if "num_parameters" not in record and "num_parameters" not in tokswap_config:
        count = _count_parameters(folder)
        if count:
            record["num_parameters"] = count
    if source_card is None:
        source_card = {}
    return render_model_card(
        repo_id,
        model_config=_read_json(folder / "config.json"),
        tokswap_config=tokswap_config,
        alignment_config=alignment_config,
        swap_record=record,
        source_card=source_card,
        alignment_hub=alignment_hub,
    )


def _count_parameters(folder: Path) -> int:
    """Sum of tensor sizes in the folder's safetensors files, read from their headers only."""
    import struct

    total = 0
    for path in folder.glob("*.safetensors"):
        try:
            with open(path, "rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(length))
        except (OSError, ValueError, struct.error):
            continue
        for name, info in header.items():
            if name == "__metadata__":
                continue
            size = 1
            for dim in info.get("shape", []):
                size *= dim
            total += size
    return total
