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


Modules: `naming` (repo ids), `download` (downloading an alignment repo, checksums, the index),
`prebuilt` (finding the prebuilt alignment for a tokenizer pair), `push` (publishing alignments and swapped
models, secret scanning, the index update), `cards` (model and alignment cards). Every name is importable from
`tokswap.hub` itself; the submodule is loaded on first use, so `import tokswap.hub.download` stays light.
"""

import importlib

_SUBMODULES = ("naming", "download", "prebuilt", "push", "cards")


def __getattr__(name):
    for submodule in _SUBMODULES:
        module = importlib.import_module(f"{__name__}.{submodule}")
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
