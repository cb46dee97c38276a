"""`TokenAlignment`: which source token each target token inherits its parameters from.

An alignment is saved like a PEFT adapter: a small JSON config (`alignment_config.json`) with the
provenance and quality figures, and the arrays in `alignment.safetensors`.

Integrity: `save_pretrained` records in the config (key `integrity`) the sha256 of `alignment.safetensors` and of
the rest of the config; with the two tokenizers' vocabulary hashes (`source_tokenizer` / `target_tokenizer`) this
is checked by every `from_pretrained`, local folder or Hub download alike. An alignment without them (older
tokswap, or written by hand) or whose files changed since they were saved is refused with
`UnverifiedAlignmentError` unless the caller passes `trust_unverified=True` (`--trust-unverified`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from tokswap.utils import atomic_output_dir, check_local_path, get_logger, sha256_file

logger = get_logger(__name__)

from tokswap.constants import ALIGNMENT_CONFIG_NAME, ALIGNMENT_WEIGHTS_NAME, INTEGRITY_KEY  # noqa: E402,F401 (re-exported)
from tokswap.errors import AlignmentError, UnverifiedAlignmentError  # noqa: E402,F401 (re-exported)

ALIGNMENT_FORMAT_VERSION = 1
TRUST_UNVERIFIED_HINT = (
    "Recompute it with `tokswap align` (or get it again from where it came from), or pass trust_unverified=True "
    "(--trust-unverified) to use it anyway."
)


def config_digest(config: dict) -> str:
    """The sha256 of an alignment config without its `integrity` block (canonical JSON: sorted keys, no spaces)."""
    body = {key: value for key, value in config.items() if key != INTEGRITY_KEY}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def integrity_problems(folder: Union[str, os.PathLike], config: dict) -> list:
    """What keeps the alignment in `folder` (with its parsed `config`) from being verified; `[]` when it is.

    Checks that the config records the sha256 of `alignment.safetensors` and of itself (written by
    `save_pretrained`), that both still match, and that both tokenizers' vocabulary hashes are recorded.
    """
    folder = Path(folder)
    record = config.get(INTEGRITY_KEY)
    if not isinstance(record, dict) or not record.get("weights_sha256") or not record.get("config_sha256"):
        return [f"{ALIGNMENT_CONFIG_NAME} records no checksums (it was saved by an older tokswap or written by hand)"]
    problems = []
    actual = sha256_file(folder / ALIGNMENT_WEIGHTS_NAME)
    if actual != record["weights_sha256"]:
        problems.append(
            f"{ALIGNMENT_WEIGHTS_NAME} has sha256 {actual[:12]}… but {record['weights_sha256'][:12]}… was recorded "
            "when it was saved: the file was changed outside tokswap (edited, corrupted, or taken from another "
            "alignment)"
        )
    if config_digest(config) != record["config_sha256"]:
        problems.append(f"{ALIGNMENT_CONFIG_NAME} was edited after it was saved (its checksum no longer matches)")
    for side in ("source", "target"):
        if not (config.get(f"{side}_tokenizer") or {}).get("vocab_hash"):
            problems.append(f"it records no {side} tokenizer vocabulary hash, so it cannot be checked against one")
    return problems


def check_integrity(
    folder: Union[str, os.PathLike], config: dict, trust_unverified: bool = False, where: Optional[str] = None
) -> None:
    """Raise `UnverifiedAlignmentError` (or only warn, with `trust_unverified=True`) unless the alignment verifies.

    Args:
        folder: the folder holding `alignment.safetensors`.
        config (`dict`): its parsed `alignment_config.json`.
        trust_unverified (`bool`, defaults to `False`): use it anyway, with a warning.
        where (`str`, *optional*): how messages name it (defaults to the folder).
    """
    problems = integrity_problems(folder, config)
    if not problems:
        return
    message = f"The alignment {where or folder} cannot be verified: {'; '.join(problems)}."
    if trust_unverified:
        logger.warning("%s Using it anyway (trust_unverified=True).", message)
        return
    raise UnverifiedAlignmentError(f"{message} {TRUST_UNVERIFIED_HINT}")


class RowSource(enum.IntEnum):
    """How the source row of one target token was decided."""

    IDENTICAL = 0  # the token's bytes exist in the source vocabulary
    SPECIAL = 1  # mapped by role (bos, eos, pad, unk, chat markers)
    GLOVE = 2  # nearest source token by relative GloVe representation
    FALLBACK = 3  # not seen by GloVe: the mean of the source tokens its text splits into
    PADDING = 4  # a row past the tokenizer's length (vocabulary padded to a multiple)
    IMPORTED = 5  # taken from a file in another format (e.g. the reference's JSON)


def tokenizer_fingerprint(tokenizer) -> dict:
    """Describe a tokenizer by name, size and a hash of its vocabulary and special tokens.

    The hash covers every (token, id) pair including added tokens, and the special-token map,
    so two tokenizers hash equal exactly when ids mean the same thing.
    """
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256()
    for token, idx in sorted(vocab.items(), key=lambda item: item[1]):
        digest.update(f"{idx}\t{token}\n".encode("utf-8", "surrogatepass"))
    specials = {}
    for attr in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = getattr(tokenizer, attr, None)
        if value is not None:
            specials[attr] = str(value)
    digest.update(json.dumps(specials, sort_keys=True).encode())
    return {
        "name_or_path": str(getattr(tokenizer, "name_or_path", "") or ""),
        "vocab_size": len(vocab),
        "vocab_hash": digest.hexdigest(),
    }


PROVENANCE_KEYS = (
    "source_tokenizer",
    "target_tokenizer",
    "corpus",
    "hyperparameters",
    "special_tokens",
    "timings_seconds",
    "tokswap_version",
    "imported_from",
)


@dataclass(frozen=True)
class HubOrigin:
    """The Hub repo an alignment was downloaded from.

    Args:
        repo_id (`str`): the alignment repo.
        revision (`str`): the commit (or branch) it was read at.
        found_by (`str`, *optional*): how the lookup found it (listed in the index, or named after the pair).
    """

    repo_id: str
    revision: str = "main"
    found_by: Optional[str] = None


@dataclass
class TokenAlignment:
    """A map `target id -> source id` covering every target row, with how and how well each row was decided.

    Args:
        target_to_source (`np.ndarray` of int64, shape `[num_target_rows]`):
            The source row each target row is initialized from.
        scores (`np.ndarray` of float32, shape `[num_target_rows]`):
            Similarity of the pair (1.0 for identical and special tokens, cosine for GloVe matches,
            0.0 where there is no similarity to speak of).
        row_sources (`np.ndarray` of int8, shape `[num_target_rows]`):
            A `RowSource` code per row.
        fallback_indptr / fallback_indices (`np.ndarray` of int64, optional):
            CSR lists of source ids whose mean initializes each `FALLBACK` row (empty for others).
        source_to_target (`np.ndarray` of int64, optional, shape `[num_source_rows]`):
            The reverse direction (`M_{s->t}` of the paper), used to evaluate the alignment (BLEU-1 maps
            source tokenizations to target ids): the identical target token where there is one,
            else the nearest target token in the matched space.
        config (`dict`):
            Provenance: `source_tokenizer` and `target_tokenizer` fingerprints, `corpus`,
            `hyperparameters`, `metrics`, `tokswap_version`.
    """

    target_to_source: np.ndarray
    scores: Optional[np.ndarray] = None
    row_sources: Optional[np.ndarray] = None
    fallback_indptr: Optional[np.ndarray] = None
    fallback_indices: Optional[np.ndarray] = None
    config: dict = field(default_factory=dict)
    source_to_target: Optional[np.ndarray] = None
    # In memory only (never saved): a vector per target token in a space of the *target* side (the target GloVe
    # vectors of `align_tokenizers`, or a donor model's embeddings), NaN rows where a token has none. The `omp`
    # and `focus` init methods express new tokens through shared ones in it.
    target_space: Optional[np.ndarray] = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.target_to_source = np.asarray(self.target_to_source, dtype=np.int64)
        n = len(self.target_to_source)
        if self.scores is None:
            self.scores = np.zeros(n, dtype=np.float32)
        if self.row_sources is None:
            self.row_sources = np.full(n, RowSource.IMPORTED, dtype=np.int8)
        if self.fallback_indptr is None:
            self.fallback_indptr = np.zeros(n + 1, dtype=np.int64)
            self.fallback_indices = np.zeros(0, dtype=np.int64)
        self.scores = np.asarray(self.scores, dtype=np.float32)
        self.row_sources = np.asarray(self.row_sources, dtype=np.int8)
        self.fallback_indptr = np.asarray(self.fallback_indptr, dtype=np.int64)
        self.fallback_indices = np.asarray(self.fallback_indices, dtype=np.int64)
        if self.source_to_target is not None:
            self.source_to_target = np.asarray(self.source_to_target, dtype=np.int64)
        if not (len(self.scores) == len(self.row_sources) == n == len(self.fallback_indptr) - 1):
            raise AlignmentError(
                f"Inconsistent alignment arrays: {n} target rows, {len(self.scores)} scores, "
                f"{len(self.row_sources)} row sources, {len(self.fallback_indptr) - 1} fallback rows."
            )
        if n and self.target_to_source.min() < 0:
            raise AlignmentError("target_to_source holds negative source ids; every target row needs a source row.")

    # ------------------------------------------------------------------ basic facts
    @property
    def num_target_rows(self) -> int:
        return len(self.target_to_source)

    @property
    def source_fingerprint(self) -> dict:
        return self.config.get("source_tokenizer", {})

    @property
    def target_fingerprint(self) -> dict:
        return self.config.get("target_tokenizer", {})

    # Typed views of `config` (the file format stays one JSON object, `alignment_config.json`; tokswap's own
    # modules read and write these names, never the raw keys).
    @property
    def metrics(self) -> dict:
        """Quality numbers: BLEU-1, similarity, self-check precision, coverage, the matching diagnostics."""
        return self.config.get("metrics", {})

    @property
    def provenance(self) -> dict:
        """How it was made: the tokenizers' fingerprints, the corpus, the settings, timings, tokswap's version."""
        return {key: self.config[key] for key in PROVENANCE_KEYS if key in self.config}

    @property
    def hub_origin(self) -> Optional[HubOrigin]:
        """Where it was downloaded from when it came from the Hub (saved with a swapped model's copy)."""
        origin = self.config.get("hub")
        if not origin:
            return None
        known = {item.name for item in dataclasses.fields(HubOrigin)}
        return HubOrigin(**{key: value for key, value in origin.items() if key in known})

    @hub_origin.setter
    def hub_origin(self, origin: Optional[HubOrigin]) -> None:
        if origin is None:
            self.config.pop("hub", None)
        else:
            self.config["hub"] = dataclasses.asdict(origin)

    def fallback_sources(self, target_id: int) -> np.ndarray:
        """Source ids whose mean initializes `target_id` when it is a FALLBACK row (else empty)."""
        return self.fallback_indices[self.fallback_indptr[target_id] : self.fallback_indptr[target_id + 1]]

    def copied_rows(self) -> np.ndarray:
        """Target ids whose row is copied unchanged from one source row: byte-identical tokens and specials."""
        kinds = self.row_sources.astype(np.int64)
        return np.flatnonzero((kinds == RowSource.IDENTICAL) | (kinds == RowSource.SPECIAL))

    def counts_by_row_source(self) -> dict:
        counts = np.bincount(self.row_sources.astype(np.int64), minlength=len(RowSource))
        return {member.name.lower(): int(counts[member]) for member in RowSource}

    def max_in_degree(self, row_source: Optional[RowSource] = None) -> tuple[int, int]:
        """(largest number of target rows mapped to one source id, that source id)."""
        ids = self.target_to_source
        if row_source is not None:
            ids = ids[self.row_sources == row_source]
        if len(ids) == 0:
            return 0, -1
        counts = np.bincount(ids)
        return int(counts.max()), int(counts.argmax())

    def check_source_vocab_size(self, num_source_rows: int) -> None:
        top = int(self.target_to_source.max()) if self.num_target_rows else -1
        if top >= num_source_rows:
            raise AlignmentError(
                f"The alignment refers to source id {top}, but the source model has only {num_source_rows} "
                "embedding rows: it was built for another source tokenizer."
            )

    # ------------------------------------------------------------------ checks against tokenizers
    def verify(self, source_tokenizer=None, target_tokenizer=None) -> None:
        """Raise `AlignmentError` unless the recorded tokenizer hashes match the tokenizers given."""
        for side, tokenizer in (("source", source_tokenizer), ("target", target_tokenizer)):
            if tokenizer is None:
                continue
            recorded = self.config.get(f"{side}_tokenizer", {}).get("vocab_hash")
            if not recorded:
                logger.warning("The alignment records no %s tokenizer hash; it cannot be checked.", side)
                continue
            actual = tokenizer_fingerprint(tokenizer)
            if actual["vocab_hash"] != recorded:
                was = self.config.get(f"{side}_tokenizer", {}).get("name_or_path", "?")
                raise AlignmentError(
                    f"This alignment was built for the {side} tokenizer '{was}' (vocab hash "
                    f"{recorded[:12]}…), but the {side} tokenizer given ('{actual['name_or_path']}', hash "
                    f"{actual['vocab_hash'][:12]}…) differs. Use an alignment made for this tokenizer pair, "
                    "or compute one with `tokswap align`."
                )
        if target_tokenizer is not None and self.num_target_rows < len(target_tokenizer):
            raise AlignmentError(
                f"The alignment covers {self.num_target_rows} target rows but the target tokenizer has "
                f"{len(target_tokenizer)} tokens."
            )

    # ------------------------------------------------------------------ padding
    def padded_to(self, num_rows: int, pad_source_id: int) -> TokenAlignment:
        """A copy extended to `num_rows` target rows, the extra rows marked PADDING."""
        extra = num_rows - self.num_target_rows
        if extra <= 0:
            return self
        indptr_tail = np.full(extra, self.fallback_indptr[-1], dtype=np.int64)
        return TokenAlignment(
            target_to_source=np.concatenate([self.target_to_source, np.full(extra, pad_source_id, dtype=np.int64)]),
            scores=np.concatenate([self.scores, np.zeros(extra, dtype=np.float32)]),
            row_sources=np.concatenate([self.row_sources, np.full(extra, RowSource.PADDING, dtype=np.int8)]),
            fallback_indptr=np.concatenate([self.fallback_indptr, indptr_tail]),
            fallback_indices=self.fallback_indices.copy(),
            config=dict(self.config),
            source_to_target=self.source_to_target,
            target_space=self.target_space,
        )

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, save_directory: Union[str, os.PathLike], overwrite: bool = False) -> Path:
        """Write `alignment.safetensors` + `alignment_config.json` to `save_directory` (atomically).

        Args:
            save_directory (`str` or `os.PathLike`): a new or empty folder.
            overwrite (`bool`, defaults to `False`): replace a folder written by an earlier `save_pretrained`
                (one holding `alignment_config.json`). Any other non-empty folder or file is always refused.

        Raises:
            `OutputExistsError`: `save_directory` holds something this call must not replace.
        """
        from safetensors.numpy import save_file

        from tokswap.constants import __version__

        save_directory = Path(save_directory)
        config = {key: value for key, value in self.config.items() if key != INTEGRITY_KEY}
        config.setdefault("tokswap_version", __version__)
        config["format_version"] = ALIGNMENT_FORMAT_VERSION
        config["num_target_rows"] = self.num_target_rows
        config["row_source_counts"] = self.counts_by_row_source()
        tensors = {
            "target_to_source": self.target_to_source,
            "scores": self.scores,
            "row_sources": self.row_sources,
            "fallback_indptr": self.fallback_indptr,
            "fallback_indices": self.fallback_indices,
        }
        if self.source_to_target is not None:
            tensors["source_to_target"] = self.source_to_target
        config = json.loads(json.dumps(config, ensure_ascii=False))  # the digest is of what the file will hold
        if not self.source_fingerprint.get("vocab_hash") or not self.target_fingerprint.get("vocab_hash"):
            logger.warning(
                "This alignment records no tokenizer fingerprints: loading it will need trust_unverified=True. "
                "Build it with `align_tokenizers` (or give the tokenizers to `from_reference_json`)."
            )
        # Written into a temporary sibling renamed into place: never half an alignment, never new weights beside
        # an old config.
        with atomic_output_dir(save_directory, overwrite=overwrite, marker=ALIGNMENT_CONFIG_NAME) as tmp:
            save_file(tensors, str(tmp / ALIGNMENT_WEIGHTS_NAME), metadata={"format": "np"})
            config[INTEGRITY_KEY] = {
                "algorithm": "sha256",
                "weights_sha256": sha256_file(tmp / ALIGNMENT_WEIGHTS_NAME),
                "config_sha256": config_digest(config),
            }
            with open(tmp / ALIGNMENT_CONFIG_NAME, "w", encoding="utf-8") as handle:
                json.dump(config, handle, indent=2, sort_keys=True, ensure_ascii=False)
                handle.write("\n")
        self.config = config
        return save_directory

    @classmethod
    def from_pretrained(
        cls, path_or_repo_id: Union[str, os.PathLike], trust_unverified: bool = False, **hub_kwargs: Any
    ) -> TokenAlignment:
        """Load an alignment from a local folder (or, via `tokswap.hub`, from a Hub repo), checking its integrity.

        Args:
            path_or_repo_id (`str` or `os.PathLike`): a folder written by `save_pretrained`, or a Hub repo id.
            trust_unverified (`bool`, defaults to `False`): use an alignment whose checksums or vocabulary hashes
                are missing or do not match, with a warning, instead of refusing it.
            hub_kwargs: passed to `tokswap.hub.download.download_alignment` (`revision`, `token`, ...).

        Raises:
            `UnverifiedAlignmentError`: the files are not the ones `save_pretrained` wrote (see `check_integrity`).
            `AlignmentError`: the folder is not an alignment.
        """
        from safetensors.numpy import load_file

        check_local_path(path_or_repo_id, "The alignment")
        path = Path(path_or_repo_id)
        where = str(path)
        if not path.is_dir():
            from tokswap.hub.download import download_alignment  # a local folder needs no network

            where = str(path_or_repo_id)
            path = Path(download_alignment(str(path_or_repo_id), trust_unverified=trust_unverified, **hub_kwargs))
        weights, config_file = path / ALIGNMENT_WEIGHTS_NAME, path / ALIGNMENT_CONFIG_NAME
        if not weights.is_file() or not config_file.is_file():
            raise AlignmentError(
                f"{path} is not an alignment folder: it needs {ALIGNMENT_WEIGHTS_NAME} and {ALIGNMENT_CONFIG_NAME} "
                "(write one with `TokenAlignment.save_pretrained` or `tokswap align`)."
            )
        with open(config_file, encoding="utf-8") as handle:
            config = json.load(handle)
        if config.get("format_version", 1) > ALIGNMENT_FORMAT_VERSION:
            raise AlignmentError(
                f"{path} was written by a newer tokswap (format {config['format_version']}); upgrade tokswap."
            )
        check_integrity(path, config, trust_unverified, where=where)
        tensors = load_file(str(weights))
        alignment = cls(
            target_to_source=tensors["target_to_source"],
            scores=tensors.get("scores"),
            row_sources=tensors.get("row_sources"),
            fallback_indptr=tensors.get("fallback_indptr"),
            fallback_indices=tensors.get("fallback_indices"),
            config=config,
            source_to_target=tensors.get("source_to_target"),
        )
        if config.get("num_target_rows", alignment.num_target_rows) != alignment.num_target_rows:
            raise AlignmentError(f"{path}: the config and the arrays disagree on the number of target rows.")
        return alignment

    def push_to_hub(self, repo_id: Optional[str] = None, **kwargs: Any):
        """Push to the Hub (`alignment.safetensors`, `alignment_config.json`, card) in one commit.

        `repo_id` defaults to `tokswap-alignments/<source>_to_<target>`; see `tokswap.hub.push_alignment`
        for `private`, `token`, `revision`, `commit_message` and `update_index`.
        """
        from tokswap.hub.push import push_alignment

        return push_alignment(self, repo_id=repo_id, **kwargs)

    @classmethod
    def from_reference_json(
        cls, path: Union[str, os.PathLike], source_tokenizer=None, target_tokenizer=None
    ) -> TokenAlignment:
        """Import the reference TokAlign code's JSON (`{"target_id": source_id, ...}`).

        Target ids the file does not mention are an error: every row needs a source.
        """
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
        if not isinstance(raw, dict) or not raw:
            raise AlignmentError(f"{path}: expected a non-empty JSON object mapping target ids to source ids.")
        pairs = {int(k): int(v) for k, v in raw.items()}
        n = max(pairs) + 1
        if target_tokenizer is not None:
            n = max(n, len(target_tokenizer))
        missing = sorted(set(range(n)) - set(pairs))
        if missing:
            raise AlignmentError(
                f"{path} maps {len(pairs)} target ids but {len(missing)} of the {n} target rows are missing "
                f"(first: {missing[:5]})."
            )
        target_to_source = np.array([pairs[i] for i in range(n)], dtype=np.int64)
        config = {"imported_from": str(path)}
        if source_tokenizer is not None:
            config["source_tokenizer"] = tokenizer_fingerprint(source_tokenizer)
        if target_tokenizer is not None:
            config["target_tokenizer"] = tokenizer_fingerprint(target_tokenizer)
        return cls(target_to_source=target_to_source, config=config)

    def __repr__(self) -> str:
        src = self.source_fingerprint.get("name_or_path", "?")
        tgt = self.target_fingerprint.get("name_or_path", "?")
        return f"TokenAlignment({src!r} -> {tgt!r}, rows={self.num_target_rows}, {self.counts_by_row_source()})"
