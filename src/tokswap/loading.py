"""The one place tokswap turns a name into a model or a tokenizer.

A name is, in this order: an object already loaded (passed through), an existing folder or file (a GGUF file
loads with `gguf_file=`), a tokswap asset name (`smollm2-135m`, `qwen2.5`, ...; see `tokswap assets list`), or a
Hub id. A *model's* name also gives its tokenizer everywhere: `load_tokenizer("smollm2-135m")` is the
tokenizer saved with that model, as `AutoTokenizer.from_pretrained("HuggingFaceTB/SmolLM2-135M")` is for a Hub
model id. The offline asset builders (`tokswap.offline`) are imported only for a name they know, so a Hub id or
a folder never waits on them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tokswap.errors import TokswapError
from tokswap.utils import check_local_path

# keyword arguments `AutoTokenizer.from_pretrained` takes from a model load's settings
TOKENIZER_KWARGS = ("revision", "token", "trust_remote_code", "cache_dir", "gguf_file")


class LoadingError(TokswapError, OSError):
    """Raised when a name resolves to nothing a model or tokenizer can be loaded from.

    Also an `OSError`, the error `from_pretrained` raises for the same cause, so callers that catch that keep working.
    """


def _not_loadable(what: str, name: str, err: Exception) -> LoadingError:
    """One line for a name `from_pretrained` could not load: the cause, then the fix."""
    cause = " ".join(str(err).split())
    return LoadingError(
        f"Could not load {what} from '{name}' ({cause}). Pass an existing folder, a reachable Hub id, or a "
        "tokswap asset name (see `tokswap assets list`)."
    )


@dataclass(frozen=True)
class Location:
    """Where a name points: a folder or Hub id for `from_pretrained`, plus the keyword arguments it needs.

    Args:
        path (`str`): a local folder or a Hub id.
        kwargs (`dict`): extra `from_pretrained` keyword arguments (`gguf_file=` for a GGUF checkpoint).
        asset (`str`, *optional*): the tokswap asset name it came from.
    """

    path: str
    kwargs: dict = field(default_factory=dict)
    asset: str | None = None


def _asset_kind(name: str, prefer: str = "model") -> str | None:
    """`"model"`, `"tokenizer"` or None: which kind of tokswap asset `name` is (no download, no build). A name that
    is both (`smollm2`, `gemma3`) is the kind asked for first: a tokenizer load never needs the model asset."""
    from tokswap.offline import assets

    key = name.lower()
    found = {
        "model": assets.model_asset_key(key) is not None,
        "tokenizer": assets.tokenizer_asset_key(key) is not None,
    }
    for kind in (prefer, "tokenizer" if prefer == "model" else "model"):
        if found[kind]:
            return kind
    return None


def _gguf_location(path: Path, asset: str | None = None) -> Location:
    """A GGUF file, or a folder holding one and no config.json, as `from_pretrained(folder, gguf_file=...)`."""
    if path.is_file() and path.suffix == ".gguf":
        return Location(str(path.parent), {"gguf_file": path.name}, asset)
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return Location(str(path), {"gguf_file": ggufs[0].name}, asset)
    return Location(str(path), {}, asset)


def resolve(name_or_path: str | os.PathLike, what: str = "The model", prefer: str = "model") -> Location:
    """Where a model or tokenizer name points (folder, GGUF, asset or Hub id), without loading it.

    Args:
        name_or_path: a folder, a GGUF file, a tokswap asset name or a Hub id.
        what: how an error message names it, e.g. `"The source model"`.
        prefer: `"model"` or `"tokenizer"`: the asset kind a name that is both stands for.

    Returns:
        A `Location`; a Hub id comes back as itself.
    """
    name = os.fspath(name_or_path)
    check_local_path(name, what)
    path = Path(os.path.expanduser(name))
    if path.exists():
        return _gguf_location(path)
    kind = _asset_kind(name, prefer)
    if kind is None:
        return Location(name)
    from tokswap.offline import assets

    if kind == "model":
        return _gguf_location(Path(assets.model_path(name)), asset=name)
    return Location(str(assets.tokenizer_path(name)), {}, name)


def load_tokenizer(name_or_path, **kwargs):
    """A tokenizer from an asset name, a folder, a `tokenizer.json` file, a GGUF file or a Hub id.

    A model's name gives the tokenizer saved with that model. Tokenizer objects are passed through.

    Args:
        name_or_path: what to load, or an already loaded tokenizer.
        **kwargs: `revision`, `token`, `trust_remote_code`, `cache_dir` (others are ignored, so a model
            load's keyword arguments can be passed as they are).

    Raises:
        LoadingError: nothing loads from that name (a missing folder, or a Hub id that is not there).
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        return name_or_path
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    name = os.fspath(name_or_path)
    if name.endswith(".json") and Path(name).is_file():  # a bare tokenizer.json
        return PreTrainedTokenizerFast(tokenizer_file=name)
    location = resolve(name, "The tokenizer", prefer="tokenizer")
    allowed = {k: v for k, v in kwargs.items() if k in TOKENIZER_KWARGS}
    try:
        return AutoTokenizer.from_pretrained(location.path, **{**allowed, **location.kwargs})
    except OSError as err:  # not found locally, on the Hub or in its cache
        raise _not_loadable("a tokenizer", name, err) from err


def load_model(name_or_path, **model_kwargs):
    """`AutoModelForCausalLM.from_pretrained` for a folder, a GGUF file, an asset name or a Hub id.

    Args:
        name_or_path: what to load; a loaded model is passed through.
        **model_kwargs: passed to `from_pretrained` (`dtype`, `revision`, `token`, ...);
            `trust_remote_code` defaults to False.

    Raises:
        LoadingError: nothing loads from that name (a missing folder, or a Hub id that is not there).
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        return name_or_path
    from transformers import AutoModelForCausalLM

    location = resolve(name_or_path)
    kwargs = {**location.kwargs, **model_kwargs}
    kwargs.setdefault("trust_remote_code", False)
    try:
        return AutoModelForCausalLM.from_pretrained(location.path, **kwargs)
    except OSError as err:  # not found locally, on the Hub or in its cache
        raise _not_loadable("a model", os.fspath(name_or_path), err) from err


def load_model_and_tokenizer(name_or_path, tokenizer=None, **model_kwargs):
    """`(model, tokenizer)`: the model, and `tokenizer` or else the tokenizer saved with the model.

    Raises:
        LoadingError: the model has no tokenizer beside it and none was given.
    """
    model = load_model(name_or_path, **model_kwargs)
    if tokenizer is not None:
        return model, load_tokenizer(tokenizer, **model_kwargs)
    source = name_or_path if isinstance(name_or_path, (str, os.PathLike)) else model.config._name_or_path
    return model, model_tokenizer(source, **model_kwargs)


def model_tokenizer(name_or_path, **kwargs):
    """The tokenizer saved with a model (its folder, GGUF file, asset or Hub repo).

    Raises:
        LoadingError: nothing there loads as a tokenizer; the message says to pass one.
    """
    try:  # a model loaded from a folder since deleted ends here too: the hint below is the fix
        return load_tokenizer(name_or_path, **kwargs)
    except (OSError, ValueError) as err:
        raise LoadingError(
            f"Could not load the tokenizer of the model '{name_or_path}' ({err}); pass a tokenizer explicitly "
            "(`source_tokenizer=` in Python, `--source-tokenizer` on the command line)."
        ) from err
