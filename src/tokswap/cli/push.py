"""`tokswap push FOLDER REPO_ID`: publish a swapped model or an alignment to the Hub (`tokswap.hub`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tokswap.alignment import TokenAlignment
from tokswap.hub import ALIGNMENT_SUBFOLDER, HubPushError, push_alignment, push_model_folder
from tokswap.hub.naming import ALIGNMENT_NAMESPACE_ENV, DEFAULT_ALIGNMENT_NAMESPACE

PUSH_EPILOG = """examples:
  tokswap push smollm2-qwen me/SmolLM2-135M-qwen-tokenizer --private
  tokswap push alignments/smollm2-qwen2.5 --alignment-only          # -> tokswap-alignments/<src>_to_<tgt>
  tokswap push smollm2-qwen me/smollm2-to-qwen-alignment --alignment-only --no-index

The token comes from `hf auth login` / $HF_TOKEN (or --token); it is never written to any file.
"""


def register_cli(subparsers) -> None:
    parser = subparsers.add_parser(
        "push",
        help="push a swapped model folder (or an alignment) to the Hugging Face Hub",
        description="Push a folder written by `tokswap swap`/`train` (model, tokenizer, alignment/, "
        "tokswap_config.json) to the Hub in one commit with a rendered model card, or only its alignment.",
        epilog=PUSH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("folder", help="a saved swapped model, or an alignment folder with --alignment-only")
    parser.add_argument(
        "repo_id",
        nargs="?",
        default=None,
        help="target repo (required for models; for alignments defaults to <namespace>/<src>_to_<tgt>)",
    )
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--revision", default=None, help="branch to push to (created if missing)")
    parser.add_argument("--commit-message", default=None)
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--token", default=None, help="Hub token (default: the one huggingface_hub finds)")
    parser.add_argument(
        "--alignment-only", action="store_true", help="push only the alignment (FOLDER/alignment or FOLDER)"
    )
    parser.add_argument(
        "--no-index", action="store_true", help="with --alignment-only: do not add the pair to the index repo"
    )
    parser.add_argument(
        "--namespace",
        default=None,
        help=f"alignment namespace (default ${ALIGNMENT_NAMESPACE_ENV} or {DEFAULT_ALIGNMENT_NAMESPACE})",
    )
    parser.add_argument(
        "--trust-unverified",
        action="store_true",
        help="with --alignment-only: push an alignment whose checksums are missing or do not match "
        "(it is re-saved with fresh ones)",
    )
    parser.set_defaults(func=_cli_push)


def _cli_push(args) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise HubPushError(f"{folder} is not a folder.")
    if args.alignment_only:
        alignment_folder = folder / ALIGNMENT_SUBFOLDER if (folder / ALIGNMENT_SUBFOLDER).is_dir() else folder
        alignment = TokenAlignment.from_pretrained(alignment_folder, trust_unverified=args.trust_unverified)
        info = push_alignment(
            alignment,
            repo_id=args.repo_id,
            private=args.private or None,
            token=args.token,
            revision=args.revision,
            commit_message=args.commit_message,
            update_index=not args.no_index,
            namespace=args.namespace,
        )
    else:
        if not args.repo_id:
            raise HubPushError("Pushing a model needs a REPO_ID (e.g. `tokswap push FOLDER me/my-model`).")
        info = push_model_folder(
            folder,
            args.repo_id,
            private=args.private or None,
            token=args.token,
            revision=args.revision,
            commit_message=args.commit_message,
            create_pr=args.create_pr,
        )
    print(getattr(info, "commit_url", None) or info)
    return 0
