#!/usr/bin/env python
"""Compute TokAlign alignments for popular tokenizer pairs and publish them on a Hub.

Every file comes out of the pipeline: tokenizers from `tokswap.offline.assets`, the alignment from
`tokswap.align.pipeline.align_tokenizers`, the repo (arrays, config, card) and the index entry from
`tokswap.hub.push_alignment`. Nothing is written by hand.

Examples:

    # everything popular, both directions, to the Hub huggingface_hub is configured for
    python scripts/build_prebuilt_alignments.py --namespace tokswap-alignments

    # a quick run against a loopback Hub started by this script (kept in ./prebuilt-hub)
    python scripts/build_prebuilt_alignments.py --loopback --storage prebuilt-hub --quick --pairs smollm2:qwen2.5

    # to another endpoint
    python scripts/build_prebuilt_alignments.py --endpoint http://127.0.0.1:8765 --pairs gpt-neox:llama3
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

# Popular pairs (source:target, names from `tokswap.offline.assets`). Both directions where people swap
# both ways; Qwen2.5 and Qwen3 share their BPE, so that pair is left out.
POPULAR_PAIRS = (
    "smollm2:qwen2.5", "qwen2.5:smollm2",
    "smollm2:llama3", "llama3:smollm2",
    "smollm2:gemma3", "gemma3:smollm2",
    "smollm2:qwen3",
    "gpt-neox:qwen2.5", "qwen2.5:gpt-neox",
    "gpt-neox:llama3", "llama3:gpt-neox",
    "gpt-neox:gemma3",
    "llama3:qwen2.5", "qwen2.5:llama3",
    "gemma3:qwen3", "qwen3:gemma3",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Compute and push prebuilt alignments for popular tokenizer pairs.",
        epilog=__doc__.split("Examples:", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pairs", default="popular",
                        help="comma-separated SOURCE:TARGET asset names, or 'popular' (default)")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint (default: $HF_ENDPOINT / huggingface.co)")
    parser.add_argument("--loopback", action="store_true", help="start a loopback Hub and push there")
    parser.add_argument("--storage", default=None, help="with --loopback: keep the Hub's repositories in this folder")
    parser.add_argument("--port", type=int, default=0, help="with --loopback: port (0 = any free one)")
    parser.add_argument("--namespace", default=None, help="alignment namespace (default $TOKSWAP_ALIGNMENT_NAMESPACE or tokswap-alignments)")
    parser.add_argument("--corpus-bytes", type=int, default=None, help="size of tokswap's default corpus")
    parser.add_argument("--dim", type=int, default=None, help="GloVe dimensions (default 300)")
    parser.add_argument("--iterations", type=int, default=None, help="GloVe iterations (default 15)")
    parser.add_argument("--quick", action="store_true",
                        help="small settings for a smoke run: 2 MB corpus, 64 dims, 5 iterations, no semantic similarity")
    parser.add_argument("--private", action="store_true", help="create the repos private")
    parser.add_argument("--save-dir", default=None, help="also keep each alignment in SAVE_DIR/<source>_to_<target>")
    parser.add_argument("--report", default=None, help="write a JSON report (pair, repo, metrics, seconds) here")
    parser.add_argument("--keep-going", action="store_true", help="continue with the next pair when one fails")
    return parser.parse_args(argv)


def selected_pairs(spec: str) -> list[tuple[str, str]]:
    names = POPULAR_PAIRS if spec.strip() == "popular" else [p for p in spec.split(",") if p.strip()]
    pairs = []
    for item in names:
        if ":" not in item:
            raise SystemExit(f"--pairs: '{item}' is not SOURCE:TARGET")
        source, target = (part.strip() for part in item.split(":", 1))
        pairs.append((source, target))
    return pairs


def start_hub(args):
    """Start the loopback Hub before huggingface_hub is imported, and point the clients at it."""
    from tokswap.testing import LoopbackHub, hub_client_env

    token = os.environ.get("HF_TOKEN") or f"hf_builder_{secrets.token_hex(12)}"
    hub = LoopbackHub(port=args.port, storage_dir=args.storage, tokens={token: "tokswap-builder"}).start()
    hf_home = tempfile.mkdtemp(prefix="tokswap-builder-hf-home-")  # the builder's client cache
    os.environ.update(hub_client_env(hub.endpoint, hf_home, token))
    print(f"loopback Hub at {hub.endpoint} (storage {hub.storage_dir})", flush=True)
    return hub


def check_lookup(source, target, alignment, repo_id) -> dict:
    """Look the pair up as `TokenizerSwapper.from_pretrained` will, from an empty cache and then a warm one.

    Returns the two timings; raises if what comes back is not what was pushed.
    """
    import huggingface_hub.constants as hf_constants
    import numpy as np

    from tokswap.hub import find_prebuilt_alignment

    saved = hf_constants.HF_HUB_CACHE
    with tempfile.TemporaryDirectory(prefix="tokswap-lookup-cache-") as cache:
        hf_constants.HF_HUB_CACHE = cache
        try:
            timings = {}
            for label in ("lookup_cold_seconds", "lookup_warm_seconds"):
                t0 = time.perf_counter()
                found = find_prebuilt_alignment(source, target)
                timings[label] = round(time.perf_counter() - t0, 3)
                if found is None or found.config["hub"]["repo_id"] != repo_id:
                    raise RuntimeError(f"the pair does not resolve to {repo_id} after pushing it")
                if not np.array_equal(found.target_to_source, alignment.target_to_source):
                    raise RuntimeError(f"{repo_id} serves other arrays than were pushed")
        finally:
            hf_constants.HF_HUB_CACHE = saved
    return timings


def main(argv=None) -> int:
    args = parse_args(argv)
    hub = start_hub(args) if args.loopback else None
    if args.endpoint and not args.loopback:
        if "huggingface_hub" in sys.modules:
            raise SystemExit("--endpoint must be applied before huggingface_hub is imported")
        os.environ["HF_ENDPOINT"] = args.endpoint
        os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
    if args.namespace:
        os.environ["TOKSWAP_ALIGNMENT_NAMESPACE"] = args.namespace

    from tokswap.offline import assets
    from tokswap.align.pipeline import AlignmentConfig, align_tokenizers
    from tokswap.hub import alignment_repo_id, push_alignment

    overrides = {}
    if args.quick:
        overrides.update(corpus_bytes=2_000_000, dim=64, iterations=5, semantic_similarity=False)
    for name in ("corpus_bytes", "dim", "iterations"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    config = AlignmentConfig(**overrides)

    report, failures = [], 0
    try:
        for source_name, target_name in selected_pairs(args.pairs):
            started = time.perf_counter()
            try:
                source = load_tokenizer(source_name)
                target = load_tokenizer(target_name)
                # Cards and repo names use the ids people know from the Hub, not the local asset path.
                source.name_or_path = assets.ASSET_HUB_IDS.get(source_name, source_name)
                target.name_or_path = assets.ASSET_HUB_IDS.get(target_name, target_name)
                alignment = align_tokenizers(source, target, config=config)
                computed = time.perf_counter() - started
                repo_id = alignment_repo_id(source, target)
                if args.save_dir:
                    alignment.save_pretrained(Path(args.save_dir) / repo_id.split("/")[-1], overwrite=True)
                info = push_alignment(alignment, repo_id=repo_id, private=args.private or None)
            except Exception as err:  # report and go on, or stop
                failures += 1
                print(f"FAILED {source_name} -> {target_name}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
                if not args.keep_going:
                    raise
                continue
            lookup = check_lookup(source, target, alignment, repo_id)
            metrics = alignment.config.get("metrics", {})
            row = {
                "source": source_name, "target": target_name, "repo_id": repo_id, "revision": info.oid,
                "bleu1": metrics.get("bleu1"), "semantic_similarity": metrics.get("semantic_similarity"),
                "coverage_trained_target": metrics.get("coverage_trained_target"),
                "target_rows": alignment.num_target_rows, "row_sources": alignment.counts_by_row_source(),
                "compute_seconds": round(computed, 1), "total_seconds": round(time.perf_counter() - started, 1),
                **lookup,
            }
            report.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if args.report:
            Path(args.report).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        if hub is not None:
            hub.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
