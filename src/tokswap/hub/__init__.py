"""Alignments and swapped models on the Hugging Face Hub.

The alignment-repo convention
-----------------------------
An alignment for a (source tokenizer, target tokenizer) pair lives in a **model repo**

    <namespace>/<source-slug>_to_<target-slug>

where `<namespace>` defaults to `tokswap-alignments` (override with `$TOKSWAP_ALIGNMENT_NAMESPACE`)
and a slug is the tokenizer's name lower-cased, without its organization, with characters the Hub
refuses replaced by "-" (`Qwen/Qwen2.5-0.5B` -> `qwen2.5-0.5b`). The Hub forbids "--" in repo ids,
hence `_to_`. Each repo holds exactly three files, written by `push_alignment` in one commit:

- `alignment.safetensors`: the arrays (`target_to_source`, `scores`, `row_sources`, fallbacks),
- `alignment_config.json`: provenance, including both tokenizers' vocabulary hashes and the
  alignment metrics (BLEU-1, semantic similarity, coverage),
- `README.md`: a card rendered from `hub_cards/alignment_card.md`; its YAML metadata records the
  vocabulary hashes and the sha256 of `alignment.safetensors` as well.

Integrity does not depend on the card: `alignment_config.json` records the sha256 of the weights and
of itself (`TokenAlignment.save_pretrained`), checked by `TokenAlignment.from_pretrained` on every load;
the index pins both checksums too. A missing or unparsable card only means one check fewer.

Names are a convenience; identity is the pair of vocabulary hashes. The collection repo
`<namespace>/index` holds `index.json`, which maps `"<source vocab hash>:<target vocab hash>"` to the
repo id, the commit that was pushed (`revision`) and the sha256 of its `alignment.safetensors` and
`alignment_config.json`.
Looking a pair up is therefore one small download (cached by huggingface_hub and re-validated with
a HEAD request), whatever the tokenizers happen to be called locally. When the index has no entry,
the name-derived repo is tried, and what it holds is checked against the tokenizers actually loaded.

Every download goes through huggingface_hub's cache (`snapshot_download` / `hf_hub_download`), so
with `HF_HUB_OFFLINE=1` the alignments used before still load. Set `$TOKSWAP_NO_PREBUILT_ALIGNMENTS=1`
to never look for one, and `$TOKSWAP_ALIGNMENT_ENDPOINT` to read alignments from another Hub
endpoint than `$HF_ENDPOINT`. `HF_TOKEN` is never sent to that other host; `$TOKSWAP_ALIGNMENT_TOKEN` is.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

from tokswap.alignment import (
    ALIGNMENT_CONFIG_NAME,
    ALIGNMENT_WEIGHTS_NAME,
    INTEGRITY_KEY,
    AlignmentError,
    TokenAlignment,
    UnverifiedAlignmentError,
    tokenizer_fingerprint,
)
from tokswap.errors import TokswapError

# re-exported: part of tokswap.hub's interface
from tokswap.hub.naming import (
    ALIGNMENT_NAMESPACE_ENV,  # noqa: F401
    DEFAULT_ALIGNMENT_NAMESPACE,  # noqa: F401
    INDEX_REPO_NAME,  # noqa: F401
    alignment_index_repo_id,  # noqa: F401
    alignment_namespace,  # noqa: F401
)
from tokswap.utils import get_logger, sha256_file

logger = get_logger(__name__)

ALIGNMENT_ENDPOINT_ENV = "TOKSWAP_ALIGNMENT_ENDPOINT"
ALIGNMENT_TOKEN_ENV = "TOKSWAP_ALIGNMENT_TOKEN"
NO_PREBUILT_ENV = "TOKSWAP_NO_PREBUILT_ALIGNMENTS"
ON_MISMATCH_ENV = "TOKSWAP_ON_ALIGNMENT_MISMATCH"
INDEX_FILENAME = "index.json"
INDEX_FORMAT_VERSION = 1
from tokswap.constants import CARD_NAME, TOKSWAP_CONFIG_NAME  # noqa: E402,F401 (re-exported)

ALIGNMENT_SUBFOLDER = "alignment"
ALIGNMENT_REPO_FILES = (ALIGNMENT_WEIGHTS_NAME, ALIGNMENT_CONFIG_NAME, CARD_NAME)
ON_MISMATCH_CHOICES = ("error", "compute")

# Files small enough to scan for a leaked token before anything is uploaded.
_SECRET_SCAN_MAX_BYTES = 32 * 1024 * 1024


class HubPushError(TokswapError):
    """Raised when a folder cannot be pushed as asked (wrong folder, or it would publish a secret)."""


# ---------------------------------------------------------------------------------------- naming
def _is_true(value: Optional[str]) -> bool:
    return str(value or "").strip().lower() in {"1", "true", "yes", "on"}


def alignment_endpoint() -> Optional[str]:
    """The Hub endpoint for alignments (`$TOKSWAP_ALIGNMENT_ENDPOINT`); `None` means huggingface_hub's own."""
    return os.environ.get(ALIGNMENT_ENDPOINT_ENV) or None


def alignment_token(token: Optional[Union[str, bool]] = None, endpoint: Optional[str] = None):
    """The token to send with an alignment request to `endpoint` (default `$TOKSWAP_ALIGNMENT_ENDPOINT`).

    A token passed explicitly is used as given. The implicit one (`HF_TOKEN`, or the saved login) belongs to
    `HF_ENDPOINT`'s host, so it is never sent to another host: there `$TOKSWAP_ALIGNMENT_TOKEN` is sent if set,
    else no token (`False`, which stops huggingface_hub from reading `HF_TOKEN`).
    """
    if token is not None:
        return token
    from urllib.parse import urlparse

    from huggingface_hub import constants

    target = endpoint or alignment_endpoint()
    if target is None or urlparse(target).netloc.lower() == urlparse(constants.ENDPOINT).netloc.lower():
        return None
    return os.environ.get(ALIGNMENT_TOKEN_ENV) or False


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


def _name_of(tokenizer_or_name: Any) -> str:
    if isinstance(tokenizer_or_name, str):
        return tokenizer_or_name
    if isinstance(tokenizer_or_name, dict):
        return str(tokenizer_or_name.get("name_or_path", ""))
    return str(getattr(tokenizer_or_name, "name_or_path", "") or "")


def tokenizer_slug(tokenizer_or_name: Any, max_length: int = 44) -> str:
    """A Hub-safe short name for a tokenizer: its id without the organization, lower-cased.

    Accepts a tokenizer, a fingerprint dict (`tokenizer_fingerprint`) or a name / local path.
    """
    name = _name_of(tokenizer_or_name).strip().rstrip("/\\")
    name = re.split(r"[/\\]", name)[-1] if name else ""
    slug = re.sub(r"[^a-z0-9._]+", "-", name.lower())
    slug = re.sub(r"-{2,}", "-", slug)
    slug = re.sub(r"\.{2,}", ".", slug)
    slug = slug.replace("_to_", "-to-")  # keep the pair separator unambiguous
    slug = slug[:max_length].strip("-._")
    return slug or "tokenizer"


def alignment_repo_id(source: Any, target: Any, namespace: Optional[str] = None) -> str:
    """The conventional repo id of the alignment `source -> target`: `<namespace>/<src>_to_<tgt>`.

    Args:
        source, target: tokenizers, fingerprint dicts or names (`"Qwen/Qwen2.5-0.5B"`).
        namespace: defaults to `alignment_namespace()`.
    """
    return f"{namespace or alignment_namespace()}/{tokenizer_slug(source)}_to_{tokenizer_slug(target)}"


def pair_key(source_vocab_hash: str, target_vocab_hash: str) -> str:
    """The key of a tokenizer pair in `index.json`."""
    return f"{source_vocab_hash}:{target_vocab_hash}"


def _qualify(repo_id: str, namespace: Optional[str] = None) -> str:
    """A bare repo name (`smollm2_to_qwen2.5`) is looked for in the alignment namespace."""
    return repo_id if "/" in repo_id else f"{namespace or alignment_namespace()}/{repo_id}"


def _hf_api(token: Optional[str] = None, endpoint: Optional[str] = None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token, library_name="tokswap", library_version=_version())


def _version() -> str:
    from tokswap.constants import __version__

    return __version__


# ---------------------------------------------------------------------------------------- download
def _card_metadata(folder: Path) -> dict:
    card = folder / CARD_NAME
    if not card.is_file():
        return {}
    try:
        from huggingface_hub import ModelCard

        return ModelCard.load(card).data.to_dict()
    except Exception as err:  # the checksums in alignment_config.json are still checked on load
        logger.warning(
            "Could not read the card of %s (%s); the checksums in %s are checked instead.",
            folder,
            err,
            ALIGNMENT_CONFIG_NAME,
        )
        return {}


def _check_checksum(
    folder: Path,
    expected_sha256: Optional[str],
    where: str,
    name: str = ALIGNMENT_WEIGHTS_NAME,
    trust_unverified: bool = False,
) -> None:
    if not expected_sha256:
        return
    actual = sha256_file(folder / name)
    if actual == expected_sha256:
        return
    message = (
        f"{name} in {where} has sha256 {actual[:12]}… but {expected_sha256[:12]}… was recorded when tokswap "
        "pushed it: the file was changed outside tokswap (tampered with or corrupted)."
    )
    if trust_unverified:
        logger.warning("%s Using it anyway (trust_unverified=True).", message)
        return
    raise UnverifiedAlignmentError(
        f"{message} Do not use it; re-push the alignment with `push_alignment` or compute one with `tokswap align` "
        "(or pass trust_unverified=True / --trust-unverified to use it anyway)."
    )


def download_alignment(
    repo_id: str,
    revision: Optional[str] = None,
    token: Optional[Union[str, bool]] = None,
    cache_dir: Optional[Union[str, os.PathLike]] = None,
    local_files_only: bool = False,
    expected_sha256: Optional[str] = None,
    endpoint: Optional[str] = None,
    expected_config_sha256: Optional[str] = None,
    trust_unverified: bool = False,
) -> str:
    """Download an alignment repo into huggingface_hub's cache and return the local folder.

    Only the three alignment files are fetched. Works offline (`HF_HUB_OFFLINE=1`) for anything
    downloaded before. The sha256 of `alignment.safetensors` is compared with the one recorded by
    `push_alignment` in the card (when there is a readable card) and with `expected_sha256` /
    `expected_config_sha256` when given (from the index). The checksums inside `alignment_config.json`
    are checked by `TokenAlignment.from_pretrained`, card or not.

    Args:
        repo_id (`str`): `"namespace/name"`, or a bare name looked up in `alignment_namespace()`.
        revision (`str`, *optional*): branch, tag or commit; defaults to `main`.
        token (`str` or `bool`, *optional*): Hub token for private repos (never stored by tokswap).
        cache_dir (`str`, *optional*): huggingface_hub cache folder; defaults to `$HF_HUB_CACHE`.
        local_files_only (`bool`): only look in the cache.
        expected_sha256 (`str`, *optional*): the checksum `alignment.safetensors` must have.
        endpoint (`str`, *optional*): defaults to `$TOKSWAP_ALIGNMENT_ENDPOINT`, then `$HF_ENDPOINT`.
        expected_config_sha256 (`str`, *optional*): the checksum `alignment_config.json` must have.
        trust_unverified (`bool`, defaults to `False`): only warn when a checksum does not match.

    Returns:
        `str`: the folder holding `alignment.safetensors` and `alignment_config.json`.

    Raises:
        `AlignmentError` if the files are missing, `UnverifiedAlignmentError` if they do not match a
        recorded checksum; the Hub's own errors (`RepositoryNotFoundError`, `RevisionNotFoundError`, ...) otherwise.
    """
    from huggingface_hub import snapshot_download

    repo_id = _qualify(repo_id)
    folder = Path(
        snapshot_download(
            repo_id,
            revision=revision,
            token=alignment_token(token, endpoint),
            cache_dir=cache_dir,
            local_files_only=local_files_only,
            allow_patterns=list(ALIGNMENT_REPO_FILES),
            endpoint=endpoint or alignment_endpoint(),
            library_name="tokswap",
            library_version=_version(),
        )
    )
    where = f"{repo_id}@{revision or 'main'}"
    if not (folder / ALIGNMENT_WEIGHTS_NAME).is_file() or not (folder / ALIGNMENT_CONFIG_NAME).is_file():
        raise AlignmentError(
            f"The Hub repo {where} is not a tokswap alignment: it lacks {ALIGNMENT_WEIGHTS_NAME} or "
            f"{ALIGNMENT_CONFIG_NAME}. Push one with `TokenAlignment.push_to_hub` or `tokswap push --alignment-only`."
        )
    recorded = (_card_metadata(folder).get("tokswap") or {}).get("alignment_sha256")
    _check_checksum(folder, recorded, where, trust_unverified=trust_unverified)
    if expected_sha256 and expected_sha256 != recorded:
        _check_checksum(folder, expected_sha256, where, trust_unverified=trust_unverified)
    _check_checksum(folder, expected_config_sha256, where, ALIGNMENT_CONFIG_NAME, trust_unverified)
    return str(folder)


def load_alignment_index(
    namespace: Optional[str] = None,
    token: Optional[Union[str, bool]] = None,
    endpoint: Optional[str] = None,
    local_files_only: bool = False,
) -> dict:
    """The parsed `index.json` of `<namespace>/index` (`{}` entries when the repo or file does not exist).

    Network failures are raised (callers decide whether they matter); a missing index is not one.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import RemoteEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        path = hf_hub_download(
            alignment_index_repo_id(namespace),
            INDEX_FILENAME,
            token=alignment_token(token, endpoint),
            endpoint=endpoint or alignment_endpoint(),
            local_files_only=local_files_only,
            library_name="tokswap",
            library_version=_version(),
        )
    except (RepositoryNotFoundError, RevisionNotFoundError, RemoteEntryNotFoundError):
        # The Hub answered: there is no index. (A cache miss offline is raised: "unreachable".)
        return _empty_index()
    with open(path, encoding="utf-8") as handle:
        index = json.load(handle)
    if index.get("format_version", 1) > INDEX_FORMAT_VERSION:
        raise AlignmentError(
            f"{alignment_index_repo_id(namespace)}/{INDEX_FILENAME} was written by a newer tokswap; upgrade tokswap."
        )
    index.setdefault("alignments", {})
    return index


def _empty_index() -> dict:
    return {"format_version": INDEX_FORMAT_VERSION, "alignments": {}}


class _HubUnreachable(ConnectionError):
    pass


def _hub_reachable(endpoint: Optional[str] = None, timeout: float = 3.0) -> bool:
    """One quick request without retries: does anything answer at the Hub endpoint?

    huggingface_hub retries a refused connection five times with back-off (about 25 s); a lookup
    that is only an optimization must not cost that when no Hub is reachable.
    """
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.is_offline_mode():
        return False
    url = (endpoint or alignment_endpoint() or constants.ENDPOINT).rstrip("/") + "/api/whoami-v2"
    try:
        get_session().head(url, timeout=timeout)  # any HTTP answer, even 401, means a Hub is there
    except Exception as err:  # refused, DNS failure, timeout, proxy error...
        logger.debug("The Hub at %s did not answer (%s).", url, type(err).__name__)
        return False
    return True


def _network_failure_types() -> tuple:
    """Exceptions that mean "no Hub answered" (as opposed to "the Hub said no")."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    types = [LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError, TimeoutError, _HubUnreachable]
    try:
        import httpx

        types.append(httpx.TransportError)
    except ImportError:  # pragma: no cover - huggingface_hub 2 always has httpx
        pass
    try:
        import requests

        types.append(requests.exceptions.ConnectionError)
        types.append(requests.exceptions.Timeout)
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


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
        The alignment (its `config["hub"]` records repo id and revision), or `None` when no Hub
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
    local_only = not _hub_reachable()
    if local_only:
        logger.info("No Hub reachable: looking for a prebuilt alignment in the local cache only.")

    entry = None
    try:
        index = load_alignment_index(namespace, token=token, local_files_only=local_only)
        entry = index["alignments"].get(pair_key(source_fp["vocab_hash"], target_fp["vocab_hash"]))
    except unreachable as err:
        logger.info("No Hub reachable for prebuilt alignments (%s); computing the alignment.", type(err).__name__)
        return None
    except HfHubHTTPError as err:
        logger.warning("Could not read the alignment index (%s); trying the repo named after the pair.", err)

    if entry is not None:
        repo_id, pinned, expected = entry["repo_id"], entry.get("revision"), entry.get("alignment_sha256")
        expected_config = entry.get("config_sha256")
        how = f"listed in {alignment_index_repo_id(namespace)}"
    else:
        repo_id, pinned, expected = alignment_repo_id(source_fp, target_fp, namespace), None, None
        expected_config = None
        how = "named after the tokenizer pair"
    use_revision = revision or pinned
    where = f"{repo_id}@{use_revision or 'main'}"
    try:
        folder = download_alignment(
            repo_id,
            revision=use_revision,
            token=token,
            cache_dir=cache_dir,
            expected_sha256=expected,
            local_files_only=local_only,
            expected_config_sha256=expected_config,
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
        message = f"The prebuilt alignment {where} ({how}) cannot be used: {err}"
        if on_mismatch == "error":
            raise AlignmentError(
                message + " Pass on_mismatch='compute' to compute a fresh alignment instead."
            ) from None
        logger.warning("%s Computing a fresh alignment instead (on_mismatch='compute').", message)
        return None
    except HfHubHTTPError as err:
        logger.warning("The Hub refused the prebuilt alignment %s (%s); computing the alignment.", where, err)
        return None
    alignment.config["hub"] = {"repo_id": repo_id, "revision": use_revision or "main", "found_by": how}
    logger.info("Using the prebuilt alignment %s (%s) instead of computing one.", where, how)
    return alignment


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


# ---------------------------------------------------------------------------------------- push helpers
def _stage_folder(source: Path, staging: Path) -> None:
    """Mirror `source` into `staging` with hard links (copies across filesystems): no big copies."""

    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, staging, copy_function=link_or_copy, dirs_exist_ok=True)


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


# ---------------------------------------------------------------------------------------- push: alignments
def push_alignment(
    alignment: TokenAlignment,
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
    public = TokenAlignment(
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
            "metrics": alignment.config.get("metrics", {}),
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


# ---------------------------------------------------------------------------------------- push: models
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
        if alignment is not None and alignment.config.get("hub"):
            extra["alignment_hub"] = alignment.config["hub"]
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
