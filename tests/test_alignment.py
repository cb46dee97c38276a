"""`TokenAlignment`: its typed views of the config survive a save and a load, in the same file format."""

import json

import numpy as np

from tokswap.alignment import ALIGNMENT_CONFIG_NAME, HubOrigin, RowSource, TokenAlignment


def _alignment() -> TokenAlignment:
    fingerprint = {"name_or_path": "tiny", "vocab_hash": "ab" * 32, "vocab_size": 3}
    return TokenAlignment(
        target_to_source=np.array([0, 1, 1]),
        scores=np.array([1.0, 1.0, 0.5], dtype=np.float32),
        row_sources=np.array([RowSource.IDENTICAL, RowSource.IDENTICAL, RowSource.GLOVE], dtype=np.int8),
        config={
            "source_tokenizer": fingerprint,
            "target_tokenizer": fingerprint,
            "metrics": {"bleu1": 0.5},
            "corpus": {"num_bytes": 10},
        },
    )


def test_typed_views_read_the_config():
    alignment = _alignment()
    assert alignment.metrics == {"bleu1": 0.5}
    assert set(alignment.provenance) == {"source_tokenizer", "target_tokenizer", "corpus"}
    assert alignment.hub_origin is None


def test_hub_origin_round_trips_through_the_file(tmp_path):
    alignment = _alignment()
    alignment.hub_origin = HubOrigin("org/pair", "abc123", "listed in org/index")
    alignment.save_pretrained(tmp_path / "a")
    # the file format is unchanged: one JSON object, the origin under "hub"
    on_disk = json.loads((tmp_path / "a" / ALIGNMENT_CONFIG_NAME).read_text())
    assert on_disk["hub"] == {"repo_id": "org/pair", "revision": "abc123", "found_by": "listed in org/index"}
    loaded = TokenAlignment.from_pretrained(tmp_path / "a")
    assert loaded.hub_origin == HubOrigin("org/pair", "abc123", "listed in org/index")
    assert loaded.metrics == {"bleu1": 0.5}
    loaded.hub_origin = None
    assert "hub" not in loaded.config


def test_an_origin_with_keys_from_another_version_still_reads():
    alignment = _alignment()
    alignment.config["hub"] = {"repo_id": "org/pair", "revision": "main", "endpoint": "https://example.org"}
    assert alignment.hub_origin == HubOrigin("org/pair", "main", None)
