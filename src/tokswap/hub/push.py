"""Publishing to the Hub: alignments (one commit, card, index entry) and swapped model folders, with secrets
scanned and local paths redacted first."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Union

from tokswap.constants import (
    ALIGNMENT_CONFIG_NAME,
    ALIGNMENT_SUBFOLDER,
    ALIGNMENT_WEIGHTS_NAME,
    CARD_NAME,
    INTEGRITY_KEY,
    RUN_MARKER_NAME,
    TOKSWAP_CONFIG_NAME,
)
from tokswap.errors import AlignmentError, TokswapError
from tokswap.hub.download import (
    ALIGNMENT_ENDPOINT_ENV,
    ALIGNMENT_TOKEN_ENV,
    INDEX_FILENAME,
    INDEX_FORMAT_VERSION,
    _hf_api,
    _version,
    alignment_endpoint,
    alignment_token,
    load_alignment_index,
)
from tokswap.hub.naming import _qualify, alignment_index_repo_id, alignment_repo_id, pair_key
from tokswap.utils import get_logger, sha256_file

logger = get_logger(__name__)


# Files small enough to scan for a leaked token before anything is uploaded.
_SECRET_SCAN_MAX_BYTES = 32 * 1024 * 1024


class HubPushError(TokswapError):
    """Raised when a folder cannot be pushed as asked (wrong folder, or it would publish a secret)."""


def _push_token(token: Optional[Union[str, bool]] = None):
    """`alignment_token` for a push, which cannot succeed without a token: say so before anything is uploaded."""
    resolved = alignment_token(token)
    if resolved is False:
        from huggingface_hub import constants

        raise HubPushError(
            f"The alignment endpoint {alignment_endpoint()} (${ALIGNMENT_ENDPOINT_ENV}) is another host than the "
            f"Hub ({constants.ENDPOINT}), so your Hugging Face token is not sent there and the push has no token. "
            f"Set ${ALIGNMENT_TOKEN_ENV} to a token of that host, or pass one (token=... / --token)."
        )
    return resolved


def _training_leftovers(folder: str, names: list) -> set:
    """What `tokswap train` / `distill` leave beside the final model, never meant for the Hub: stage and
    checkpoint folders (optimizer states: twice the model's size), TensorBoard runs and the run marker."""
    return {
        name
        for name in names
        if name in ("stage1", "stage2", "runs", RUN_MARKER_NAME)
        or (name.startswith("checkpoint-") and Path(folder, name).is_dir())
    }


def _stage_folder(source: Path, staging: Path) -> None:
    """Mirror `source` into `staging` with hard links (copies across filesystems): no big copies. Training
    leftovers at its top level stay behind (`_training_leftovers`)."""

    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    def ignore(folder, names):
        return _training_leftovers(folder, names) if Path(folder) == source else set()

    shutil.copytree(source, staging, copy_function=link_or_copy, ignore=ignore, dirs_exist_ok=True)


def _known_tokens(token: Optional[Union[str, bool]]) -> list[str]:
    tokens = []
    if isinstance(token, str) and token:
        tokens.append(token)
    try:
        from huggingface_hub import get_token

        configured = get_token()
        if configured:
            tokens.append(configured)
    except Exception:  # pragma: no cover - no token configured is fine
        pass
    return [t for t in tokens if len(t) >= 8]


def assert_no_secret(folder: Union[str, os.PathLike], token: Optional[Union[str, bool]] = None) -> None:
    """Refuse to publish a folder in which the Hub token appears (cards, configs, logs, ...).

    Args:
        folder: the folder about to be uploaded.
        token: the token given for the push (the configured one is checked as well).

    Raises:
        `HubPushError` naming the file, never the token.
    """
    secrets = [t.encode() for t in _known_tokens(token)]
    if not secrets:
        return
    for path in sorted(Path(folder).rglob("*")):
        if not path.is_file() or path.stat().st_size > _SECRET_SCAN_MAX_BYTES:
            continue
        data = path.read_bytes()
        if any(secret in data for secret in secrets):
            raise HubPushError(
                f"{path.relative_to(folder)} contains your Hub token; nothing was uploaded. Remove it from "
                "that file (tokswap never writes tokens, so it came from elsewhere) and push again."
            )


def _redact_local_paths(value):
    """Replace absolute local paths in JSON-like data by their last component.

    Tokenizer and model names are often local folders (`/home/alice/.cache/...`); a public repo
    should say `qwen2.5-v1`, not publish the uploader's file system layout.
    """
    if isinstance(value, dict):
        return {key: _redact_local_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact_local_paths(item) for item in value]
    if (
        isinstance(value, str)
        and len(value) > 1
        and "\n" not in value
        and (os.path.isabs(value) or value.startswith("~"))
    ):
        return Path(value.rstrip("/\\")).name or value
    return value


def _redact_json_file(path: Path) -> None:
    """Rewrite a staged JSON file without local paths (unlinking first: staged files are hard links)."""
    if not path.is_file():
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return
    redacted = _redact_local_paths(data)
    if redacted != data:
        path.unlink()
        path.write_text(json.dumps(redacted, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _create_repo_and_branch(api, repo_id: str, private: Optional[bool], revision: Optional[str]) -> None:
    api.create_repo(repo_id, private=private, exist_ok=True)
    if revision and revision != "main":
        api.create_branch(repo_id, branch=revision, exist_ok=True)


def push_alignment(
    alignment,
    repo_id: Optional[str] = None,
    private: Optional[bool] = None,
    token: Optional[str] = None,
    revision: Optional[str] = None,
    commit_message: Optional[str] = None,
    update_index: bool = True,
    namespace: Optional[str] = None,
):
    """Push an alignment to the Hub in one commit (`alignment.safetensors`, `alignment_config.json`, card).

    Args:
        alignment (`TokenAlignment`): what to push; it must record both tokenizer fingerprints.
        repo_id (`str`, *optional*): defaults to `alignment_repo_id(source, target, namespace)`;
            a bare name goes to the alignment namespace.
        private (`bool`, *optional*): visibility when the repo is created.
        token (`str`, *optional*): Hub token (used for the requests only; never written anywhere).
        revision (`str`, *optional*): branch to commit to (created if needed).
        commit_message (`str`, *optional*): defaults to "Add tokswap alignment <src> -> <tgt>".
        update_index (`bool`): also record the pair in `<namespace>/index` so lookups by pair find it.
            A failure there (e.g. no write access) is logged, the push itself stands.
        namespace (`str`, *optional*): the alignment namespace (for the default repo id and the index).

    Returns:
        `huggingface_hub.CommitInfo` of the alignment commit.
    """
    from tokswap.hub import cards

    source_fp, target_fp = alignment.source_fingerprint, alignment.target_fingerprint
    if not source_fp.get("vocab_hash") or not target_fp.get("vocab_hash"):
        raise AlignmentError(
            "This alignment does not record its tokenizers' fingerprints, so nobody could check it against "
            "their tokenizers. Build it with `align_tokenizers` (or pass the tokenizers to "
            "`TokenAlignment.from_reference_json`) before pushing."
        )
    repo_id = _qualify(repo_id, namespace) if repo_id else alignment_repo_id(source_fp, target_fp, namespace)
    api = _hf_api(token=_push_token(token), endpoint=alignment_endpoint())
    public = type(alignment)(
        target_to_source=alignment.target_to_source,
        scores=alignment.scores,
        row_sources=alignment.row_sources,
        fallback_indptr=alignment.fallback_indptr,
        fallback_indices=alignment.fallback_indices,
        config=_redact_local_paths({k: v for k, v in alignment.config.items() if k not in ("hub", INTEGRITY_KEY)}),
    )
    with tempfile.TemporaryDirectory(prefix="tokswap-push-alignment-") as tmp:
        folder = Path(tmp) / "alignment"
        public.save_pretrained(folder)
        digest = sha256_file(folder / ALIGNMENT_WEIGHTS_NAME)
        config_digest = sha256_file(folder / ALIGNMENT_CONFIG_NAME)
        card = cards.render_alignment_card(public, repo_id=repo_id, alignment_sha256=digest)
        card.save(str(folder / CARD_NAME))
        assert_no_secret(folder, token)
        _create_repo_and_branch(api, repo_id, private, revision)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            revision=revision,
            commit_message=commit_message
            or f"Add tokswap alignment {source_fp.get('name_or_path', '?')} -> {target_fp.get('name_or_path', '?')}",
        )
    logger.info("Pushed the alignment to %s (commit %s).", repo_id, info.oid[:12] if info.oid else "?")
    if update_index:
        entry = {
            "repo_id": repo_id,
            "revision": info.oid or revision or "main",
            "alignment_sha256": digest,
            "config_sha256": config_digest,
            "source_tokenizer": source_fp,
            "target_tokenizer": target_fp,
            "metrics": alignment.metrics,
            "tokswap_version": _version(),
            "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        try:
            update_alignment_index(entry, namespace=namespace, token=token)
        except Exception as err:  # the alignment is on the Hub; only discovery by pair is missing
            logger.warning(
                "The alignment was pushed, but %s could not be updated (%s: %s); lookups by pair will fall "
                "back to the repo name.",
                alignment_index_repo_id(namespace),
                type(err).__name__,
                err,
            )
    return info


def update_alignment_index(entry: dict, namespace: Optional[str] = None, token: Optional[str] = None, retries: int = 3):
    """Add or replace one pair in `<namespace>/index/index.json` (read, modify, commit on top of what was read)."""
    from huggingface_hub.errors import HfHubHTTPError

    index_repo = alignment_index_repo_id(namespace)
    api = _hf_api(token=_push_token(token), endpoint=alignment_endpoint())
    api.create_repo(index_repo, exist_ok=True)
    key = pair_key(entry["source_tokenizer"]["vocab_hash"], entry["target_tokenizer"]["vocab_hash"])
    for attempt in range(retries):
        parent = api.repo_info(index_repo).sha
        index = load_alignment_index(namespace, token=token)
        index["format_version"] = INDEX_FORMAT_VERSION
        index["alignments"][key] = entry
        payload = (json.dumps(index, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            return api.upload_file(
                path_or_fileobj=payload,
                path_in_repo=INDEX_FILENAME,
                repo_id=index_repo,
                commit_message=f"Index {entry['repo_id']}",
                parent_commit=parent,
            )
        except HfHubHTTPError as err:
            # 412: someone else updated the index since we read it; read it again and retry.
            status = getattr(getattr(err, "response", None), "status_code", None)
            if status != 412 or attempt == retries - 1:
                raise
    return None


def push_model_folder(
    folder: Union[str, os.PathLike],
    repo_id: str,
    private: Optional[bool] = None,
    token: Optional[str] = None,
    revision: Optional[str] = None,
    commit_message: Optional[str] = None,
    create_pr: bool = False,
    card_kwargs: Optional[dict] = None,
):
    """Push a saved swapped-model folder (`TokenizerSwapper.save_pretrained`) in one commit, with a card.

    The folder is staged (hard links, so no copy of the weights), a `README.md` model card is rendered
    from its `tokswap_config.json` and `alignment/alignment_config.json` unless it already has one,
    and everything goes up with a single `upload_folder`.

    Returns:
        `huggingface_hub.CommitInfo`.
    """
    from tokswap.hub import cards

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise HubPushError(
            f"{folder} is not a saved model (no config.json). Save one with `swapper.save_pretrained(dir)`, "
            "or push only an alignment folder with `--alignment-only`."
        )
    api = _hf_api(token=token)
    with tempfile.TemporaryDirectory(prefix="tokswap-push-model-") as tmp:
        staging = Path(tmp) / "model"
        _stage_folder(folder, staging)
        _ensure_generation_config(staging)
        for name in (TOKSWAP_CONFIG_NAME, f"{ALIGNMENT_SUBFOLDER}/{ALIGNMENT_CONFIG_NAME}"):
            _redact_json_file(staging / name)
        if not (staging / CARD_NAME).is_file():
            card = cards.render_model_card_from_folder(staging, repo_id=repo_id, **(card_kwargs or {}))
            card.save(str(staging / CARD_NAME))
        assert_no_secret(staging, token)
        _create_repo_and_branch(api, repo_id, private, revision)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(staging),
            revision=revision,
            create_pr=create_pr or None,
            commit_message=commit_message or "Upload model swapped to a new tokenizer with tokswap",
        )
    logger.info("Pushed %s to %s (commit %s).", folder.name, repo_id, info.oid[:12] if info.oid else "?")
    return info


def _ensure_generation_config(folder: Path) -> None:
    """Write `generation_config.json` from `config.json` when the save did not (old configs)."""
    if (folder / "generation_config.json").is_file():
        return
    try:
        from transformers import AutoConfig, GenerationConfig

        config = AutoConfig.from_pretrained(str(folder))
        GenerationConfig.from_model_config(config).save_pretrained(str(folder))
    except Exception as err:  # the model still loads without it
        logger.warning("Could not write generation_config.json (%s).", err)


def push_swapped_model(
    swapper,
    repo_id: str,
    private: Optional[bool] = None,
    token: Optional[str] = None,
    revision: Optional[str] = None,
    commit_message: Optional[str] = None,
    create_pr: bool = False,
    **save_kwargs,
):
    """Publish a `TokenizerSwapper`'s model: weights, tokenizer, generation config, alignment, card.

    Everything is written to a temporary folder with `swapper.save_pretrained` (model + tokenizer,
    `alignment/`, `tokswap_config.json`), a model card is rendered from `hub_cards/model_card.md`,
    and the folder is uploaded in one commit. The token is used for the requests only.

    Args:
        swapper (`TokenizerSwapper`): the swapped (and possibly trained) model.
        repo_id (`str`): `"user/name"`.
        private (`bool`, *optional*): visibility when the repo is created.
        token (`str`, *optional*): Hub token.
        revision (`str`, *optional*): branch to commit to (created if needed).
        commit_message (`str`, *optional*).
        create_pr (`bool`): open a pull request instead of committing to the branch.
        save_kwargs: passed to `swapper.save_pretrained` (e.g. `max_shard_size`).

    Returns:
        `huggingface_hub.CommitInfo`.
    """
    source_card = _source_card_metadata(getattr(swapper, "source_model_id", None), token=token)
    with tempfile.TemporaryDirectory(prefix="tokswap-save-") as tmp:
        folder = Path(tmp) / "model"
        if hasattr(swapper, "save_pretrained"):
            swapper.save_pretrained(str(folder), **save_kwargs)
        else:  # pragma: no cover - duck-typed swappers
            swapper.model.save_pretrained(str(folder), **save_kwargs)
            swapper.tokenizer.save_pretrained(str(folder))
            if getattr(swapper, "alignment", None) is not None:
                swapper.alignment.save_pretrained(folder / ALIGNMENT_SUBFOLDER)
        extra = {"source_card": source_card, "swap_record": getattr(swapper, "swap_record", None)}
        alignment = getattr(swapper, "alignment", None)
        if alignment is not None and alignment.hub_origin is not None:
            extra["alignment_hub"] = dataclasses.asdict(alignment.hub_origin)
        return push_model_folder(
            folder,
            repo_id,
            private=private,
            token=token,
            revision=revision,
            commit_message=commit_message,
            create_pr=create_pr,
            card_kwargs=extra,
        )


def _source_card_metadata(source_model_id: Optional[str], token: Optional[str] = None) -> dict:
    """The source model's card metadata (license, language, datasets), from its folder or the Hub; `{}` if none."""
    if not source_model_id:
        return {}
    from huggingface_hub import ModelCard

    local = Path(str(source_model_id))
    try:
        if local.is_dir():
            return ModelCard.load(local / CARD_NAME).data.to_dict() if (local / CARD_NAME).is_file() else {}
        return ModelCard.load(str(source_model_id), token=token).data.to_dict()
    except Exception as err:  # no card, no Hub, private: the card just says less
        logger.info("No model card found for the source model %s (%s).", source_model_id, type(err).__name__)
        return {}
