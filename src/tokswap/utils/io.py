"""Filesystem helpers: the cache directory and writes that never leave half-written outputs."""

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from tokswap.constants import ENV_CACHE
from tokswap.errors import TokswapError


def cache_dir(*parts: str) -> Path:
    """The tokswap cache: `$TOKSWAP_CACHE`, else `$XDG_CACHE_HOME/tokswap`, else `~/.cache/tokswap`.

    Fetched assets, converted models, tokenized corpora and co-occurrence counts live here. It is
    deliberately outside `HF_HOME`: tests point `HF_HOME` at a throw-away folder, and the real
    assets (hundreds of MB) should survive that.
    """
    root = os.environ.get(ENV_CACHE)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "tokswap")
    path = Path(root, *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk_size), b""):
            digest.update(block)
    return digest.hexdigest()


class OutputExistsError(TokswapError):
    """The output path holds something that writing there would destroy (the message says how to proceed)."""


def check_output_dir(path, overwrite: bool = False, marker: Optional[str] = None) -> None:
    """Refuse an output folder whose current content would be lost without the user asking for it.

    Writing is allowed when `path` does not exist or is an empty folder. A non-empty folder is replaced
    only when `overwrite` is set *and* it holds `marker` (the file tokswap writes into its own outputs,
    e.g. `tokswap_config.json`): a folder tokswap did not write is never deleted, overwrite or not.

    Args:
        path (`str` or `os.PathLike`): the output folder.
        overwrite (`bool`, defaults to `False`): replace a previous tokswap output at `path`.
        marker (`str`, *optional*): file name that identifies a folder as tokswap's own output.

    Raises:
        `OutputExistsError`: when writing to `path` would delete something it should not.
        `OutputNotWritableError`: when `path` could not be written at all (see `check_can_create`).
    """
    path = Path(path)
    if path.is_symlink():
        raise OutputExistsError(f"{path} is a symbolic link; give a new folder (or the real folder it points to).")
    if path.exists() and not path.is_dir():
        raise OutputExistsError(f"{path} is an existing file, not a folder; choose another output path.")
    if path.exists() and any(path.iterdir()):
        _check_replaceable(path, overwrite, marker)
    check_can_create(path)  # the output is written beside `path`, then renamed into place


def _check_replaceable(path: Path, overwrite: bool, marker: Optional[str]) -> None:
    if marker is None or not (path / marker).is_file():
        what = f"has no {marker}, so it was not written by tokswap" if marker else "is not a tokswap output"
        raise OutputExistsError(
            f"{path} is not empty and {what}: tokswap never replaces it, even with --overwrite. "
            "Choose a new or empty folder."
        )
    if not overwrite:
        raise OutputExistsError(
            f"{path} already holds a tokswap output. Pass --overwrite (overwrite=True) to replace it, "
            "or choose a new folder."
        )


class OutputNotWritableError(TokswapError):
    """The output path cannot be created or written (a read-only place, or a file where a folder should be)."""


def check_can_create(path) -> None:
    """Fail now, not after a long run, when `path` could not be created: its nearest existing ancestor must be a
    folder this process can create entries in (probed by creating and removing a temporary folder, which also
    catches read-only file systems and root's writes to `/proc`-like places that permission bits do not show).

    Raises:
        `OutputNotWritableError`: an ancestor is a file, or the nearest existing folder refuses new entries.
    """
    path = Path(path).absolute()
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputNotWritableError(f"{ancestor} is a file, so {path} cannot be created: choose another output path.")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tokswap-probe-", dir=ancestor))
    except OSError as err:
        raise OutputNotWritableError(
            f"Cannot create {path}: writing in {ancestor} fails ({err.strerror or err}). "
            "Choose an output folder you can write to."
        ) from err


def check_output_file(path, is_ours, what: str) -> None:
    """Refuse an output file that exists and was not written by tokswap, or that could not be created.

    Args:
        path: the file to be written (atomically, at the end of a possibly long run).
        is_ours (`Callable[[Path], bool]`): whether an existing file is an earlier result of the same command.
        what (`str`): what the command writes, for the message (e.g. `"a tokswap eval result"`).

    Raises:
        `OutputExistsError` / `OutputNotWritableError`
    """
    path = Path(path)
    if path.is_symlink() or path.is_dir():
        raise OutputExistsError(f"{path} is a {'symbolic link' if path.is_symlink() else 'folder'}; give a file path.")
    if path.exists() and not is_ours(path):
        raise OutputExistsError(
            f"{path} exists and is not {what}: tokswap never writes over it. Choose a new file name."
        )
    check_can_create(path)


def _chmod_like_mkdir(folder: Path) -> None:
    """mkdtemp creates 0700 folders; the renamed result should have the permissions a plain mkdir gives."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)


@contextlib.contextmanager
def atomic_output_dir(final_path, overwrite: bool = False, marker: Optional[str] = None, in_cache: bool = False):
    """Yield a temporary folder beside `final_path`; on success it is renamed into place.

    `final_path` may be missing or an empty folder; a previous tokswap output (a folder holding `marker`)
    is replaced only with `overwrite=True`; anything else is refused with `OutputExistsError` before
    anything is written (see `check_output_dir`). `in_cache=True` is for entries of tokswap's own cache
    (`cache_dir`), which nobody else writes: whatever is there (e.g. a half-built entry) is replaced.
    On an exception the temporary folder is removed and `final_path` is left as it was.
    """
    final_path = Path(final_path)
    if not in_cache:
        check_output_dir(final_path, overwrite, marker)  # fail before the (possibly long) writing starts
    final_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final_path.name}.tmp-", dir=final_path.parent))
    _chmod_like_mkdir(tmp)
    try:
        yield tmp
        if not in_cache:
            check_output_dir(final_path, overwrite, marker)  # something may have appeared while writing
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final_path.exists() and not (final_path.is_dir() and not any(final_path.iterdir())):
        # Move the old one aside first so that a crash never leaves neither.
        old = final_path.with_name(f".{final_path.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        os.replace(final_path, old)
        os.replace(tmp, final_path)
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
    else:  # missing, or an empty folder (rename replaces an empty directory)
        os.replace(tmp, final_path)


class MissingPathError(TokswapError):
    """A name that can only be a local path (not an asset name or a Hub id) points at nothing."""


# What a Hub repository id can look like: "name" or "namespace/name", letters, digits, "-", "_", ".".
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def looks_like_local_path(name: str) -> bool:
    """Whether `name` can only mean a local file or folder: it starts with `/`, `./`, `../` or `~`, or holds a
    path separator in a way no Hub id (`namespace/name`) or tokswap asset name (`qwen2.5`) does."""
    if name in (".", "..") or name.startswith(("/", "./", "../", "~", ".\\", "..\\")):
        return True
    separators = {os.sep, os.altsep} - {None}
    if any(sep in name for sep in separators - {"/"}):
        return True  # e.g. a backslash on Windows
    return "/" in name and not _HUB_ID.match(name)


def check_local_path(name_or_path, what: Optional[str] = None) -> None:
    """Raise `MissingPathError` when `name_or_path` can only be a local path and nothing exists there.

    Asset names and Hub ids pass (they are resolved later), and so do objects that are not paths. Failing
    here turns an `OSError` traceback from deep inside `from_pretrained` (after a Hub round trip) into one line.

    Args:
        name_or_path: what the user gave (`str`, `os.PathLike`, or an already loaded object).
        what (`str`, *optional*): how the message names it, e.g. `"The source model"`.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        return
    text = os.fspath(name_or_path)
    if os.path.exists(os.path.expanduser(text)):
        return
    if looks_like_local_path(text):
        prefix = f"{what} " if what else ""
        raise MissingPathError(
            f"{prefix}{text} does not exist: give an existing folder, a tokswap asset name (tokswap assets list) "
            "or a Hub id."
        )


@contextlib.contextmanager
def atomic_output_file(final_path, mode: str = "wb"):
    """Yield an open handle to a temporary file beside `final_path`, renamed into place on success."""
    final_path = Path(final_path)
    final_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final_path.name}.tmp-", dir=final_path.parent)
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
        # mkstemp creates 0600 files; give the result the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, final_path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
