"""Settings recorded in bench/results without the paths of the machine that ran them.

A path under the tokswap cache becomes `$TOKSWAP_CACHE/...`, one under the repository becomes relative to it, one
under the home folder `~/...`; anything else is kept as given.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def portable(value):
    """`value` (a str, or a dict / list of them) with machine-specific path prefixes replaced."""
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(portable(item) for item in value)
    if not isinstance(value, str) or os.sep not in value:
        return value
    from tokswap.utils import cache_dir

    path = Path(value).expanduser()
    if not path.is_absolute():
        return value
    for root, label in ((cache_dir(), "$TOKSWAP_CACHE"), (REPO, None), (Path.home(), "~")):
        try:
            rest = path.resolve().relative_to(Path(root).resolve())
        except ValueError:
            continue
        return str(rest) if label is None else f"{label}/{rest}"
    return value
