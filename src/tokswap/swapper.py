"""`TokenizerSwapper`: load a causal LM, give it a new tokenizer, then train, save or push it.

```python
from tokswap import TokenizerSwapper

swapper = TokenizerSwapper.from_pretrained("HuggingFaceTB/SmolLM2-135M", "Qwen/Qwen2.5-0.5B")
swapper.save_pretrained("smollm2-qwen")          # a plain transformers model folder
swapper.train(dataset)                            # TokAlign's two-stage recipe (tokswap.training)
```
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import os
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from tokswap.alignment import RowSource, TokenAlignment, tokenizer_fingerprint
from tokswap.errors import TokswapError
from tokswap.init_methods import DEFAULT_INIT_METHOD, get_init_method
from tokswap.loading import load_model, load_tokenizer, model_tokenizer
from tokswap.surgery import swap_vocabulary
from tokswap.utils import atomic_output_dir, check_local_path, get_logger

logger = get_logger(__name__)

from tokswap.constants import ALIGNMENT_SUBFOLDER, TOKSWAP_CONFIG_NAME  # noqa: E402,F401 (re-exported)


class SwapperError(TokswapError):
    """Raised when a swap cannot be set up (missing tokenizer, alignment or saved folder)."""


def donor_embeddings(donor, target_tokenizer, **model_kwargs) -> np.ndarray:
    """The input embeddings of a model that uses the target tokenizer, one float32 row per target token."""
    model = donor
    if isinstance(donor, (str, os.PathLike)):
        import torch

        kwargs = {k: v for k, v in model_kwargs.items() if k in ("revision", "token", "trust_remote_code")}
        model = load_model(donor, dtype=torch.float32, **kwargs)
    weight = model.get_input_embeddings().weight.detach()
    if weight.shape[0] < len(target_tokenizer) * 0.99:
        raise SwapperError(
            f"The donor model has {weight.shape[0]} embedding rows but the target tokenizer {len(target_tokenizer)} "
            "tokens: a donor must already use the target tokenizer (e.g. the teacher you will distill from)."
        )
    space = np.full((len(target_tokenizer), weight.shape[1]), np.nan, dtype=np.float32)
    rows = min(len(target_tokenizer), weight.shape[0])
    space[:rows] = weight[:rows].float().cpu().numpy()
    return space


def identity_alignment(tokenizer) -> TokenAlignment:
    """The alignment of a tokenizer to itself: every id maps to itself."""
    n = len(tokenizer)
    fingerprint = tokenizer_fingerprint(tokenizer)
    return TokenAlignment(
        target_to_source=np.arange(n, dtype=np.int64),
        scores=np.ones(n, dtype=np.float32),
        row_sources=np.full(n, RowSource.IDENTICAL, dtype=np.int8),
        config={"source_tokenizer": fingerprint, "target_tokenizer": fingerprint, "method": "identity"},
    )


def resolve_alignment(
    alignment,
    source_tokenizer,
    target_tokenizer,
    corpus=None,
    alignment_config=None,
    trust_unverified: bool = False,
    **hub_kwargs,
) -> tuple[TokenAlignment, dict]:
    """The alignment to use for a tokenizer pair, and a record of where it came from.

    Order: the one given (`TokenAlignment`, folder, or Hub id), else identity when both tokenizers
    are the same, else a prebuilt alignment for exactly this pair from the Hub
    (`tokswap.hub.find_prebuilt_alignment`), else computed with `tokswap.align.pipeline.align_tokenizers`.
    A folder or Hub id given must pass `TokenAlignment.from_pretrained`'s integrity check unless
    `trust_unverified=True`; a prebuilt one found by pair always must.
    """
    if isinstance(alignment, TokenAlignment):
        return alignment, {"origin": "given"}
    if alignment is not None:
        loaded = TokenAlignment.from_pretrained(alignment, trust_unverified=trust_unverified, **hub_kwargs)
        return loaded, {"origin": "loaded", "location": str(alignment)}
    source_fp, target_fp = tokenizer_fingerprint(source_tokenizer), tokenizer_fingerprint(target_tokenizer)
    if source_fp["vocab_hash"] == target_fp["vocab_hash"]:
        logger.info("Source and target tokenizers are identical: using the identity alignment.")
        return identity_alignment(target_tokenizer), {"origin": "identity"}
    from tokswap.align.pipeline import align_tokenizers
    from tokswap.hub import find_prebuilt_alignment

    found = find_prebuilt_alignment(source_tokenizer, target_tokenizer)
    if found is not None:
        return found, {"origin": "prebuilt", **dataclasses.asdict(found.hub_origin)}
    logger.info(
        "Computing the TokAlign alignment %s -> %s: both tokenizers tokenize %s, GloVe vectors are trained "
        "for each vocabulary and matched. This takes minutes to an hour on a CPU; save it with "
        "`swapper.alignment.save_pretrained(...)` (or `tokswap align`) to reuse it.",
        source_fp["name_or_path"] or "source",
        target_fp["name_or_path"] or "target",
        "the corpus given" if corpus is not None else "tokswap's default corpus",
    )
    computed = align_tokenizers(source_tokenizer, target_tokenizer, corpus=corpus, config=alignment_config)
    return computed, {"origin": "computed"}


# --------------------------------------------------------------------------- the swapper
class TokenizerSwapper:
    """A causal LM that has been given a new tokenizer, with what it needs to train, save and push.

    Build one with [`~TokenizerSwapper.from_pretrained`] (swap) or [`~TokenizerSwapper.load`] (reload a
    folder written by [`~TokenizerSwapper.save_pretrained`]).

    Attributes:
        model (`PreTrainedModel`): the adapted model (its vocabulary is the target tokenizer's, padded).
        tokenizer: the target tokenizer.
        alignment (`TokenAlignment`): target id -> source id used for the swap.
        source_model_id (`str`): what the source model was loaded from.
        source_tokenizer: the source model's tokenizer (`None` after `load`).
        init_method (`str`): name of the init method.
        swap_record (`dict`): how the model was made; saved as `tokswap_config.json`.
    """

    def __init__(
        self,
        model,
        tokenizer,
        alignment=None,
        source_model_id=None,
        source_tokenizer=None,
        init_method: str = DEFAULT_INIT_METHOD,
        swap_record: Optional[dict] = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.alignment = alignment
        self.source_model_id = source_model_id
        self.source_tokenizer = source_tokenizer
        self.init_method = init_method
        self.swap_record = swap_record or {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        source_model,
        target_tokenizer=None,
        alignment: Union[None, str, os.PathLike, TokenAlignment] = None,
        init_method: str = DEFAULT_INIT_METHOD,
        corpus=None,
        alignment_config=None,
        pad_to_multiple_of: Optional[int] = 64,
        source_tokenizer=None,
        seed: int = 0,
        donor=None,
        allow_nonfinite: bool = False,
        trust_unverified: bool = False,
        keep_source_words: bool = False,
        **model_kwargs,
    ) -> TokenizerSwapper:
        """Load `source_model` and give it `target_tokenizer`'s vocabulary.

        Args:
            source_model (`str`, `os.PathLike` or `PreTrainedModel`):
                Hub id, local folder, GGUF file or tokswap asset name of a causal LM (or a loaded
                model). A folder written by `save_pretrained` with no `target_tokenizer` is reloaded.
            target_tokenizer (`str` or tokenizer):
                Hub id or folder of a tokenizer, or of a *model* (its tokenizer is used), a tokswap
                asset name, or a tokenizer object.
            alignment (`TokenAlignment`, `str` or `os.PathLike`, *optional*):
                The alignment to use (object, folder, or Hub id). Without it: identity when the
                tokenizers are equal, else a prebuilt one from the Hub, else computed on `corpus`.
            init_method (`str`, defaults to `"fvt_scaled"`):
                One of `tokswap.init_methods.INIT_METHODS` (`DEFAULT_INIT_METHOD`, the measured best right after the
                swap; `"tokalign"` is the paper's rule).
            corpus (*optional*):
                Text the alignment is computed on when it has to be (see `tokswap.align.pipeline`).
            alignment_config (*optional*):
                Settings for computing the alignment (`tokswap.align.pipeline`).
            pad_to_multiple_of (`int`, *optional*, defaults to 64):
                Pad the new vocabulary to a multiple of this.
            source_tokenizer (*optional*):
                The source model's tokenizer, when it cannot be loaded from `source_model`.
            seed (`int`, defaults to 0): seed of the random init methods.
            donor (`str`, `os.PathLike` or `PreTrainedModel`, *optional*):
                A model that already uses the target tokenizer (e.g. the teacher you will distill from). Its input
                embeddings become the target-side space of the `omp` and `focus` init methods (instead of the
                alignment's target GloVe vectors); only its embeddings are kept.
            allow_nonfinite (`bool`, defaults to `False`): only warn when the source model's weights hold NaN/inf
                values; by default that is a `NonFiniteError` (the new rows would be copied from broken ones).
            trust_unverified (`bool`, defaults to `False`): use an alignment folder or Hub id whose checksums or
                vocabulary hashes are missing or do not match (with a warning) instead of refusing it
                (`UnverifiedAlignmentError`).
            keep_source_words (`bool`, defaults to `False`): extend the target vocabulary with the source
                vocabulary's whole words it spells in pieces (`tokswap.vocab_extension`), so each keeps its own row.
                The model then no longer shares the target's exact vocabulary (no token-level distillation from, or
                drafting for, a model with the target tokenizer); for swaps made for compression.
            model_kwargs:
                Passed to `AutoModelForCausalLM.from_pretrained` (`dtype`, `device_map`, `revision`,
                `token`, `attn_implementation`, `trust_remote_code`, ...).

        Returns:
            `TokenizerSwapper`.
        """
        if target_tokenizer is None:
            if isinstance(source_model, (str, os.PathLike)) and (Path(source_model) / TOKSWAP_CONFIG_NAME).is_file():
                return cls.load(source_model, trust_unverified=trust_unverified, **model_kwargs)
            raise SwapperError(
                "No target tokenizer given. Pass the tokenizer (or model) whose vocabulary the model should "
                "use, e.g. TokenizerSwapper.from_pretrained('HuggingFaceTB/SmolLM2-135M', 'Qwen/Qwen2.5-0.5B')."
            )
        get_init_method(init_method)  # fail before loading anything big
        _check_local_paths(source_model, target_tokenizer, alignment, source_tokenizer)
        target_tokenizer_id = target_tokenizer if isinstance(target_tokenizer, (str, os.PathLike)) else None
        target_tokenizer = _own_target_tokenizer(target_tokenizer, model_kwargs)
        model, source_model_id, source_tokenizer = _load_source(source_model, source_tokenizer, model_kwargs)
        extension = _kept_source_words(source_tokenizer, target_tokenizer) if keep_source_words else None
        target_tokenizer = extension.tokenizer if extension is not None else target_tokenizer
        from tokswap.trainer_utils import check_finite

        # before an alignment is computed and broken rows are copied into the new vocabulary
        check_finite(model, f"The source model {source_model_id!r}", allow_nonfinite)
        resolved, origin = resolve_alignment(
            alignment,
            source_tokenizer,
            target_tokenizer,
            corpus=corpus,
            alignment_config=alignment_config,
            trust_unverified=trust_unverified,
            **{k: v for k, v in model_kwargs.items() if k == "token"},
        )
        if extension is not None:
            _check_alignment_fits_extension(resolved, target_tokenizer)
        if donor is not None:
            resolved, origin = _with_donor(resolved, origin, donor, target_tokenizer, model_kwargs)
        before = _ModelFacts.of(model)
        swap_vocabulary(
            model,
            resolved,
            target_tokenizer,
            init_method=init_method,
            pad_to_multiple_of=pad_to_multiple_of,
            source_tokenizer=source_tokenizer,
            seed=seed,
        )
        method = get_init_method(init_method)
        record = _swap_record(
            model,
            before,
            resolved,
            origin,
            method,
            source_model_id,
            source_tokenizer,
            target_tokenizer,
            target_tokenizer_id,
            pad_to_multiple_of,
            seed,
        )
        if extension is not None:
            record["kept_source_words"] = extension.summary()
        return cls(model, target_tokenizer, resolved, source_model_id, source_tokenizer, method.name, record)

    @classmethod
    def for_drafting(cls, small_model, big_model, **kwargs) -> TokenizerSwapper:
        """`small_model` given `big_model`'s exact vocabulary, to serve as its `assistant_model`
        (`tokswap.make_draft`; distill it next with `swapper.distill(dataset, teacher=big_model)`)."""
        return make_draft(small_model, big_model, **kwargs)

    @classmethod
    def load(
        cls, directory: Union[str, os.PathLike], trust_unverified: bool = False, **model_kwargs
    ) -> TokenizerSwapper:
        """Reload a folder written by `save_pretrained` (model, tokenizer, alignment, record).

        `trust_unverified=True` accepts an `alignment/` whose checksums are missing or do not match (with a warning).
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        directory = Path(directory)
        record_file = directory / TOKSWAP_CONFIG_NAME
        if not record_file.is_file():
            raise SwapperError(
                f"{directory} has no {TOKSWAP_CONFIG_NAME}: it was not written by TokenizerSwapper.save_pretrained. "
                "To swap a model's tokenizer, pass a target tokenizer too."
            )
        record = json.loads(record_file.read_text(encoding="utf-8"))
        model_kwargs.setdefault("trust_remote_code", False)
        model = AutoModelForCausalLM.from_pretrained(str(directory), **model_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        alignment = None
        if (directory / ALIGNMENT_SUBFOLDER).is_dir():
            alignment = TokenAlignment.from_pretrained(
                directory / ALIGNMENT_SUBFOLDER, trust_unverified=trust_unverified
            )
        return cls(
            model, tokenizer, alignment, record.get("source_model"), None, record.get("init_method", "tokalign"), record
        )

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, save_directory: Union[str, os.PathLike], overwrite: bool = False, **save_kwargs) -> Path:
        """Write a plain model + tokenizer folder, `alignment/` and `tokswap_config.json`, atomically.

        The folder loads with `AutoModelForCausalLM` / `AutoTokenizer` alone; tokswap is not needed.

        Args:
            save_directory (`str` or `os.PathLike`): a new or empty folder.
            overwrite (`bool`, defaults to `False`): replace a folder written by an earlier `save_pretrained`
                (one holding `tokswap_config.json`). Any other non-empty folder or file is always refused.
            save_kwargs: passed to `model.save_pretrained` (e.g. `max_shard_size`).

        Raises:
            `OutputExistsError`: `save_directory` holds something this call must not replace.
        """
        save_directory = Path(save_directory)
        with atomic_output_dir(save_directory, overwrite=overwrite, marker=TOKSWAP_CONFIG_NAME) as tmp:
            self.model.save_pretrained(str(tmp), **save_kwargs)
            self.tokenizer.save_pretrained(str(tmp))
            if self.alignment is not None:
                self.alignment.save_pretrained(tmp / ALIGNMENT_SUBFOLDER)
            with open(tmp / TOKSWAP_CONFIG_NAME, "w", encoding="utf-8") as handle:
                json.dump(self.swap_record, handle, indent=2, sort_keys=True, ensure_ascii=False, default=str)
                handle.write("\n")
        logger.info("Saved the swapped model to %s.", save_directory)
        return save_directory

    # ------------------------------------------------------------------ what comes next
    def train(self, dataset, config=None, **kwargs):
        """Train the swapped model back to health (`tokswap.training.adapt_vocabulary`); returns its result.

        By default (`VocabAdaptationConfig(recovery="auto")`) the model before the swap, reloaded from
        `source_model` with its own tokenizer, is the teacher: the swapped model learns to match it on the same text
        (self-distillation across the swap, `tokswap.self_distillation`). Pass `teacher_model=` /
        `teacher_tokenizer=` to give it yourself, or `recovery="ce"` for plain cross-entropy (faster: a self-distillation
        step takes 1.9x a cross-entropy step, `bench/results/recovery_cost.md`). With
        `merge_original_weight` the same original model is what the decoder is moved back toward after training.
        """
        from tokswap.training import VocabAdaptationConfig, adapt_vocabulary

        config = config or VocabAdaptationConfig()
        needs_original = config.recovery == "self_distill" or config.merge_original_weight > 0
        if (needs_original or config.recovery == "auto") and kwargs.get("teacher_model") is None:
            teacher = self._original_model(required=needs_original)
            if teacher is not None:
                kwargs["teacher_model"], kwargs["teacher_tokenizer"] = teacher
        kwargs.setdefault("alignment", self.alignment)
        result = adapt_vocabulary(self.model, self.tokenizer, dataset, config, **kwargs)
        self.model = getattr(result, "model", None) or self.model
        self.swap_record.setdefault("training", []).append(_describe_run("adapt_vocabulary", config))
        return result

    def fit_new_words(self, config=None, teacher_model=None, teacher_tokenizer=None, progress: bool = True):
        """Fit the input rows of new whole words so the model reads each as the original model reads its pieces.

        Runs `tokswap.new_word_fit.fit_new_word_rows` with the model before the swap as the teacher (reloaded from
        `source_model`, or `teacher_model` / `teacher_tokenizer`). A model with tied embeddings is untied (the
        output rows keep their init, or take `config.output_weight` of the fitted rows). Call it right after
        `from_pretrained`, before `train`.

        Args:
            config ([`NewWordFitConfig`], *optional*): which words and how (default: every new token that is a space
                and letters, split into 2-6 source tokens; 8 layers matched, 20 Adam steps).
            teacher_model, teacher_tokenizer (*optional*): the original model and its tokenizer.
            progress (`bool`): log one line per batch of words.

        Returns:
            [`NewWordFitReport`].
        """
        from tokswap.new_word_fit import NewWordFitConfig, fit_new_word_rows

        config = config or NewWordFitConfig()
        if teacher_model is None:
            teacher_model, teacher_tokenizer = self._original_model(required=True)
        if teacher_tokenizer is None:
            teacher_tokenizer = self.source_tokenizer
        if teacher_tokenizer is None:
            raise SwapperError("fit_new_words needs the original tokenizer: pass teacher_tokenizer=.")
        report = fit_new_word_rows(
            self.model,
            teacher_model,
            self.alignment,
            teacher_tokenizer,
            self.tokenizer,
            config,
            progress=logger.info if progress else None,
        )
        from tokswap.trainer_utils import check_finite

        check_finite(self.model, "The model after fitting new words' rows", False)
        self.swap_record["new_word_fit"] = {**dataclasses.asdict(config), **dataclasses.asdict(report)}
        return report

    def fit_output_rows(self, texts, config=None, progress: bool = True):
        """Fit the output rows of the new tokens that occur in `texts` by the likelihood of `texts`, all else frozen.

        Runs `tokswap.output_row_fit.fit_output_rows` on the rows the swap initialized. A model with tied embeddings
        is untied (the input rows keep their init). Call it right after `from_pretrained` (or `fit_new_words`),
        before `train`; the alignment corpus, or any text of the domain the model is for, is a good `texts`.

        Args:
            texts: a list of strings, a `datasets.Dataset` with a "text" column, or a path (.txt, .jsonl, dataset
                folder).
            config ([`OutputRowFitConfig`], *optional*): how much text is read and how the rows are fitted.
            progress (`bool`): log a line now and then.

        Returns:
            [`OutputRowFitReport`].
        """
        from tokswap.output_row_fit import OutputRowFitConfig, fit_output_rows, initialized_rows
        from tokswap.trainer_utils import check_finite

        config = config or OutputRowFitConfig()
        if isinstance(texts, (str, os.PathLike)):
            from tokswap.align.pipeline import check_corpus_path, load_corpus

            check_corpus_path(texts)
            texts = load_corpus(texts)
        if hasattr(texts, "column_names"):
            texts = texts["text"]
        report = fit_output_rows(
            self.model,
            self.tokenizer,
            list(texts),
            initialized_rows(self.alignment),
            config,
            progress=logger.info if progress else None,
        )
        check_finite(self.model, "The model after fitting new tokens' output rows", False)
        self.swap_record["output_row_fit"] = {**dataclasses.asdict(config), **dataclasses.asdict(report)}
        return report

    def _original_model(self, required: bool):
        """(the model before the swap, its tokenizer), reloaded from `source_model_id`; None if it cannot be."""
        try:
            if not self.source_model_id:
                raise SwapperError("the swapper does not know where its source model came from")
            import torch

            dtype = getattr(self.model, "dtype", None) or torch.float32
            teacher = load_model(self.source_model_id, dtype=dtype)
            tokenizer = self.source_tokenizer or model_tokenizer(self.source_model_id)
        except (OSError, ValueError, TokswapError) as err:
            message = (
                f"Could not reload the original model {self.source_model_id!r} (the self-distillation teacher and "
                f"what merge_original_weight moves back toward): {err}"
            )
            if required:
                raise SwapperError(message + "; pass teacher_model= and teacher_tokenizer=.") from err
            logger.warning("%s: training with plain cross-entropy instead.", message)
            return None
        return teacher, tokenizer

    def distill(self, dataset, teacher, config=None, **kwargs):
        """Distill from a teacher sharing the new tokenizer (`tokswap.distillation.distill`); returns its result."""
        from tokswap.distillation import distill

        result = distill(self.model, self.tokenizer, teacher, dataset, config, **kwargs)
        self.model = getattr(result, "model", None) or self.model
        self.swap_record.setdefault("training", []).append(_describe_run("distill", config, teacher=teacher))
        return result

    def push_to_hub(self, repo_id: str, **kwargs):
        """Upload the model, tokenizer, alignment and a model card (`tokswap.hub.push_swapped_model`)."""
        from tokswap.hub import push_swapped_model

        return push_swapped_model(self, repo_id, **kwargs)

    def __repr__(self) -> str:
        return (
            f"TokenizerSwapper(source_model={self.source_model_id!r}, "
            f"tokenizer={getattr(self.tokenizer, 'name_or_path', '?')!r}, init_method={self.init_method!r}, "
            f"vocab_size={getattr(self.model.config, 'vocab_size', '?')})"
        )


# --------------------------------------------------------------------------- from_pretrained's steps
def _own_target_tokenizer(target_tokenizer, model_kwargs: dict):
    """The target tokenizer, loaded by name or copied: the swapper owns it, since training sets a pad token on
    it, which must not leak into the caller's object (its fingerprint would no longer match its alignments)."""
    if not isinstance(target_tokenizer, (str, os.PathLike)):
        target_tokenizer = copy.deepcopy(target_tokenizer)
    return load_tokenizer(target_tokenizer, **_tokenizer_kwargs(model_kwargs))


def _tokenizer_kwargs(model_kwargs: dict) -> dict:
    return {k: v for k, v in model_kwargs.items() if k in ("token", "trust_remote_code")}


def _load_source(source_model, source_tokenizer, model_kwargs: dict):
    """`(model, source_model_id, source_tokenizer)`: the source model and the tokenizer it was trained with."""
    if isinstance(source_model, (str, os.PathLike)):
        source_model_id = str(source_model)
        model = load_model(source_model, **model_kwargs)
    else:
        model = source_model
        source_model_id = getattr(model, "name_or_path", None) or getattr(model.config, "_name_or_path", "")
    if source_tokenizer is None and source_model_id:
        source_tokenizer = model_tokenizer(source_model_id, **model_kwargs)
    if source_tokenizer is None:
        raise SwapperError("Could not find the source model's tokenizer: pass `source_tokenizer=`.")
    return model, source_model_id, load_tokenizer(source_tokenizer, **_tokenizer_kwargs(model_kwargs))


def _with_donor(resolved: TokenAlignment, origin: dict, donor, target_tokenizer, model_kwargs: dict):
    """The alignment with a donor model's embeddings as its target-side space (for `omp` and `focus`)."""
    space = donor_embeddings(donor, target_tokenizer, **model_kwargs)
    name = donor if isinstance(donor, (str, os.PathLike)) else type(donor).__name__
    return dataclasses.replace(resolved, target_space=space), {**origin, "donor": name}


@dataclasses.dataclass(frozen=True)
class _ModelFacts:
    """What the swap record says about the model before the swap."""

    architecture: str
    num_parameters: int
    num_rows: int

    @classmethod
    def of(cls, model) -> _ModelFacts:
        return cls(
            type(model).__name__,
            sum(p.numel() for p in model.parameters()),
            model.get_input_embeddings().weight.shape[0],
        )


def _check_local_paths(source_model, target_tokenizer, alignment, source_tokenizer) -> None:
    """A path given for any of these that does not exist is a user error before anything loads."""
    for given, what in (
        (source_model, "The source model"),
        (target_tokenizer, "The target tokenizer"),
        (alignment, "The alignment"),
        (source_tokenizer, "The source tokenizer"),
    ):
        check_local_path(given, what)


def _kept_source_words(source_tokenizer, target_tokenizer):
    """The target tokenizer extended with the source's whole words (`tokswap.vocab_extension`)."""
    from tokswap.vocab_extension import keep_source_words

    return keep_source_words(source_tokenizer, target_tokenizer)


def _check_alignment_fits_extension(alignment, extended_tokenizer) -> None:
    """An alignment given for the target as it is cannot serve its extension: say so before the surgery does."""
    recorded = (alignment.config.get("target_tokenizer") or {}).get("vocab_hash")
    if recorded and recorded != tokenizer_fingerprint(extended_tokenizer)["vocab_hash"]:
        raise SwapperError(
            "keep_source_words extends the target vocabulary, but the alignment given was built for another "
            "vocabulary (the target's as it is?). Leave out the alignment to compute one for the extended "
            "vocabulary, or pass one built for it."
        )


def _swap_record(
    model,
    before: _ModelFacts,
    resolved,
    origin,
    method,
    source_model_id,
    source_tokenizer,
    target_tokenizer,
    target_tokenizer_id,
    pad_to_multiple_of,
    seed,
) -> dict:
    """How the model was made: saved beside it as `tokswap_config.json` (and read by its card)."""
    from tokswap.constants import __version__

    return {
        "tokswap_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source_model": source_model_id,
        "architecture": before.architecture,
        "num_parameters_before": int(before.num_parameters),
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "source_tokenizer": tokenizer_fingerprint(source_tokenizer),
        "target_tokenizer": tokenizer_fingerprint(target_tokenizer),
        "target_tokenizer_id": str(target_tokenizer_id) if target_tokenizer_id is not None else None,
        "source_vocab_size": int(before.num_rows),
        "target_vocab_size": int(len(target_tokenizer)),
        "padded_vocab_size": int(model.config.vocab_size),
        "pad_to_multiple_of": pad_to_multiple_of,
        "init_method": method.name,
        "init_method_paper": method.paper,
        "seed": seed,
        "alignment": {
            **origin,
            "row_source_counts": resolved.counts_by_row_source(),
            "metrics": resolved.metrics,
        },
        "tied_embeddings": bool(model.get_input_embeddings().weight is model.get_output_embeddings().weight),
        "training": [],
    }


def make_draft(small, big, big_tokenizer=None, **swap_kwargs):
    """Give `small` the vocabulary of `big` so it can serve as `big.generate(assistant_model=...)`.

    Args:
        small (`str`, `os.PathLike` or `PreTrainedModel`): the draft's starting point (Hub id, folder, GGUF file,
            tokswap asset name or model).
        big (`str`, `os.PathLike` or `PreTrainedModel`): the model to draft for; only its config, tokenizer and
            generation config are read when it is given by name.
        big_tokenizer (*optional*): the big model's tokenizer, when it cannot be loaded from `big`.
        swap_kwargs: passed to `TokenizerSwapper.from_pretrained` (`alignment`, `init_method`, `corpus`, `donor`,
            `dtype`, ...). `pad_to_multiple_of` is set by this function.

    Returns:
        `TokenizerSwapper`: its model has exactly `big`'s `vocab_size`, special token ids and generation config;
        `swap_record["draft_for"]` names `big`.
    """
    from tokswap.drafting import (
        DraftError,
        _big_generation_config,
        _big_model_config,
        _text_config,
        adopt_generation_settings,
    )

    hub_kwargs = {k: v for k, v in swap_kwargs.items() if k in ("token", "revision", "trust_remote_code")}
    big_config = _text_config(_big_model_config(big, **hub_kwargs))
    tokenizer = big_tokenizer if big_tokenizer is not None else big
    if hasattr(tokenizer, "config"):  # a loaded model: its tokenizer must be given
        raise DraftError("`big` is a loaded model: pass its tokenizer as `big_tokenizer=`.")
    if "pad_to_multiple_of" in swap_kwargs:
        raise DraftError("make_draft sets the vocabulary size to the big model's; drop `pad_to_multiple_of`.")
    vocab_size = int(big_config.vocab_size)
    # rounding the tokenizer's length up to a multiple of vocab_size gives exactly vocab_size when it fits
    swapper = TokenizerSwapper.from_pretrained(small, tokenizer, pad_to_multiple_of=vocab_size, **swap_kwargs)
    rows = swapper.model.get_input_embeddings().weight.shape[0]
    if rows != vocab_size:
        raise DraftError(
            f"The big model's vocab_size ({vocab_size}) is smaller than its tokenizer ({len(swapper.tokenizer)} "
            "tokens): a draft cannot match it. Check that `big_tokenizer` belongs to `big`."
        )
    adopt_generation_settings(swapper.model, big_config, _big_generation_config(big, big_config, **hub_kwargs))
    swapper.swap_record["draft_for"] = str(big if isinstance(big, (str, os.PathLike)) else big_config._name_or_path)
    return swapper


def _describe_run(kind: str, config, **extra) -> dict:
    description: dict[str, Any] = {"kind": kind}
    if config is not None:
        try:
            from dataclasses import asdict, is_dataclass

            description["config"] = asdict(config) if is_dataclass(config) else dict(config)
        except (TypeError, ValueError):
            description["config"] = repr(config)
    for key, value in extra.items():
        description[key] = (
            value if isinstance(value, (str, int, float)) else getattr(value, "name_or_path", repr(value))
        )
    return description


# --------------------------------------------------------------------------- CLI
