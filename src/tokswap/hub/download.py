"""Downloading an alignment repo from the Hub: only its three files, through huggingface_hub's cache, with the
checksums recorded in its card and in the index checked; the index of prebuilt alignments. Knows repos and
files, not what is inside an alignment (so `TokenAlignment.from_pretrained` can use it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Union

from tokswap.constants import (
    ALIGNMENT_CONFIG_NAME,
    ALIGNMENT_WEIGHTS_NAME,
    CARD_NAME,
    ENV_ALIGNMENT_ENDPOINT,
    ENV_ALIGNMENT_TOKEN,
)
from tokswap.errors import AlignmentError, UnverifiedAlignmentError
from tokswap.hub.naming import _qualify, alignment_index_repo_id
from tokswap.utils import get_logger, sha256_file

logger = get_logger(__name__)

ALIGNMENT_ENDPOINT_ENV = ENV_ALIGNMENT_ENDPOINT
ALIGNMENT_TOKEN_ENV = ENV_ALIGNMENT_TOKEN
INDEX_FILENAME = "index.json"
INDEX_FORMAT_VERSION = 1
ALIGNMENT_REPO_FILES = (ALIGNMENT_WEIGHTS_NAME, ALIGNMENT_CONFIG_NAME, CARD_NAME)


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


def _hf_api(token: Optional[str] = None, endpoint: Optional[str] = None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token, library_name="tokswap", library_version=_version())


def _version() -> str:
    from tokswap.constants import __version__

    return __version__


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


def hub_reachable(endpoint: Optional[str] = None, timeout: float = 3.0) -> bool:
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
