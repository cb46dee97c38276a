"""Filesystem helpers: the cache directory and writes that never leave half-written outputs."""

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """The tokswap cache: `$TOKSWAP_CACHE`, else `$XDG_CACHE_HOME/tokswap`, else `~/.cache/tokswap`.

    Fetched assets, converted models, tokenized corpora and co-occurrence counts live here. It is
    deliberately outside `HF_HOME`: tests point `HF_HOME` at a throw-away folder, and the real
    assets (hundreds of MB) should survive that.
    """
    root = os.environ.get("TOKSWAP_CACHE")
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


@contextlib.contextmanager
def atomic_output_dir(final_path, overwrite: bool = True):
    """Yield a temporary folder beside `final_path`; on success it is renamed into place.

    On an exception the temporary folder is removed and `final_path` is left as it was.
    """
    final_path = Path(final_path)
    final_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final_path.name}.tmp-", dir=final_path.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final_path.exists():
        if not overwrite:
            shutil.rmtree(tmp, ignore_errors=True)
            raise FileExistsError(f"{final_path} already exists; pass overwrite=True to replace it.")
        # Move the old one aside first so that a crash never leaves neither.
        old = final_path.with_name(f".{final_path.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        os.replace(final_path, old)
        os.replace(tmp, final_path)
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
    else:
        os.replace(tmp, final_path)


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
