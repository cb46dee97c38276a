"""Finding the prebuilt alignment of a tokenizer pair on the Hub: by the index, else by the name-derived repo,
checked against the tokenizers actually loaded; an unreachable Hub means "compute it"."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

from tokswap.alignment import HubOrigin, TokenAlignment, tokenizer_fingerprint
from tokswap.constants import ENV_NO_PREBUILT_ALIGNMENTS, ENV_ON_ALIGNMENT_MISMATCH
from tokswap.errors import AlignmentError, TokswapError
from tokswap.hub.download import (
    _is_true,
    _network_failure_types,
    download_alignment,
    hub_reachable,
    load_alignment_index,
)
from tokswap.hub.naming import alignment_index_repo_id, alignment_repo_id, pair_key
from tokswap.utils import get_logger

logger = get_logger(__name__)

NO_PREBUILT_ENV = ENV_NO_PREBUILT_ALIGNMENTS
ON_MISMATCH_ENV = ENV_ON_ALIGNMENT_MISMATCH
ON_MISMATCH_CHOICES = ("error", "compute")


def find_prebuilt_alignment(
    source_tokenizer,
    target_tokenizer,
    revision: Optional[str] = None,
    on_mismatch: Optional[str] = None,
    token: Optional[Union[str, bool]] = None,
    namespace: Optional[str] = None,
    cache_dir: Optional[Union[str, os.PathLike]] = None,
) -> Optional[TokenAlignment]:
    """Find a prebuilt alignment for this tokenizer pair on the Hub, checked against the tokenizers.

    Looks the pair's vocabulary hashes up in `<namespace>/index` (one cached request), else tries the
    conventional repo `alignment_repo_id(source, target)`. What it downloads must match: the sha256
    recorded at push time, and the vocabulary hashes of the tokenizers actually loaded.

    Args:
        source_tokenizer, target_tokenizer: the loaded tokenizers.
        revision (`str`, *optional*): the alignment repo revision; defaults to the one the index pins
            (or `main` for a repo found by name).
        on_mismatch (`str`, *optional*): `"error"` raises `AlignmentError` when the alignment found does
            not fit the tokenizers; `"compute"` logs a warning and returns `None` so the caller computes
            one. Defaults to `$TOKSWAP_ON_ALIGNMENT_MISMATCH`, else `"error"`.
        token: Hub token for private alignment repos.
        namespace: defaults to `alignment_namespace()`.
        cache_dir: huggingface_hub cache folder.

    Returns:
        The alignment (its `hub_origin` records repo id and revision), or `None` when no Hub
        answered or nothing fits this pair.
    """
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    on_mismatch = on_mismatch or os.environ.get(ON_MISMATCH_ENV) or "error"
    if on_mismatch not in ON_MISMATCH_CHOICES:
        raise TokswapError(f"on_mismatch must be one of {ON_MISMATCH_CHOICES}, not {on_mismatch!r}.")
    if _is_true(os.environ.get(NO_PREBUILT_ENV)):
        logger.info("Not looking for a prebuilt alignment (%s is set).", NO_PREBUILT_ENV)
        return None
    source_fp, target_fp = tokenizer_fingerprint(source_tokenizer), tokenizer_fingerprint(target_tokenizer)
    unreachable = _network_failure_types()
    # Without a Hub, what is in the cache still counts (HF_HUB_OFFLINE=1 or simply no network).
    local_only = not hub_reachable()
    if local_only:
        logger.info("No Hub reachable: looking for a prebuilt alignment in the local cache only.")
    try:
        candidate = _candidate_repo(source_fp, target_fp, namespace, token, local_only)
    except unreachable as err:
        logger.info("No Hub reachable for prebuilt alignments (%s); computing the alignment.", type(err).__name__)
        return None
    use_revision = revision or candidate.revision
    where = f"{candidate.repo_id}@{use_revision or 'main'}"
    try:
        folder = download_alignment(
            candidate.repo_id,
            revision=use_revision,
            token=token,
            cache_dir=cache_dir,
            expected_sha256=candidate.alignment_sha256,
            local_files_only=local_only,
            expected_config_sha256=candidate.config_sha256,
        )
        alignment = TokenAlignment.from_pretrained(folder)
        _verify_fingerprints(alignment, source_fp, target_fp, source_tokenizer, target_tokenizer)
    except (RepositoryNotFoundError, RevisionNotFoundError):
        logger.info(
            "No prebuilt alignment for %s -> %s on the Hub (%s); computing it.",
            source_fp["name_or_path"],
            target_fp["name_or_path"],
            where,
        )
        return None
    except unreachable as err:
        logger.info("No Hub reachable for prebuilt alignments (%s); computing the alignment.", type(err).__name__)
        return None
    except AlignmentError as err:
        return _unusable(f"The prebuilt alignment {where} ({candidate.how}) cannot be used: {err}", on_mismatch)
    except HfHubHTTPError as err:
        logger.warning("The Hub refused the prebuilt alignment %s (%s); computing the alignment.", where, err)
        return None
    alignment.hub_origin = HubOrigin(candidate.repo_id, use_revision or "main", candidate.how)
    logger.info("Using the prebuilt alignment %s (%s) instead of computing one.", where, candidate.how)
    return alignment


@dataclass(frozen=True)
class _Candidate:
    """The repo to try for a pair, with what the index pins about it (nothing for a repo found by name)."""

    repo_id: str
    how: str
    revision: Optional[str] = None
    alignment_sha256: Optional[str] = None
    config_sha256: Optional[str] = None


def _candidate_repo(source_fp: dict, target_fp: dict, namespace, token, local_only: bool) -> _Candidate:
    """The index's entry for the pair's vocabulary hashes, else the repo named after the pair."""
    from huggingface_hub.errors import HfHubHTTPError

    entry = None
    try:
        index = load_alignment_index(namespace, token=token, local_files_only=local_only)
        entry = index["alignments"].get(pair_key(source_fp["vocab_hash"], target_fp["vocab_hash"]))
    except HfHubHTTPError as err:
        if isinstance(err, _network_failure_types()):
            raise
        logger.warning("Could not read the alignment index (%s); trying the repo named after the pair.", err)
    if entry is None:
        return _Candidate(alignment_repo_id(source_fp, target_fp, namespace), "named after the tokenizer pair")
    return _Candidate(
        entry["repo_id"],
        f"listed in {alignment_index_repo_id(namespace)}",
        entry.get("revision"),
        entry.get("alignment_sha256"),
        entry.get("config_sha256"),
    )


def _unusable(message: str, on_mismatch: str) -> None:
    """An alignment that does not fit: an error, or (on_mismatch='compute') a warning and None."""
    if on_mismatch == "error":
        raise AlignmentError(message + " Pass on_mismatch='compute' to compute a fresh alignment instead.") from None
    logger.warning("%s Computing a fresh alignment instead (on_mismatch='compute').", message)
    return None


def _verify_fingerprints(alignment, source_fp, target_fp, source_tokenizer, target_tokenizer) -> None:
    """`alignment.verify`, reusing fingerprints already computed (hashing a 150k vocabulary takes ~0.5 s)."""
    for side, fingerprint in (("source", source_fp), ("target", target_fp)):
        recorded = alignment.config.get(f"{side}_tokenizer", {}).get("vocab_hash")
        if recorded and recorded != fingerprint["vocab_hash"]:
            alignment.verify(source_tokenizer, target_tokenizer)  # raises, with the canonical message
    if not alignment.source_fingerprint.get("vocab_hash") or not alignment.target_fingerprint.get("vocab_hash"):
        alignment.verify(source_tokenizer, target_tokenizer)  # warns that it cannot be checked
    elif alignment.num_target_rows < target_fp["vocab_size"]:
        raise AlignmentError(
            f"The alignment covers {alignment.num_target_rows} target rows but the target tokenizer has "
            f"{target_fp['vocab_size']} tokens."
        )
