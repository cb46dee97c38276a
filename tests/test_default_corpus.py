"""The default corpus: streamed from Hub datasets laid out like the real ones, or built offline when no Hub answers."""

import gzip
import io
import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokswap import default_corpus as dc
from tokswap.offline.corpus import DOMAIN_SHARES, is_test_text

# talks to the loopback Hub; streaming through `datasets` takes seconds per source
pytestmark = [pytest.mark.usefixtures("hub"), pytest.mark.slow]

LANGUAGES = ("en", "de")
SOURCES = (
    *(dc.HubTextSource("wikimedia/wikipedia", "multilingual", lang, config=f"20231101.{lang}") for lang in LANGUAGES),
    dc.HubTextSource("codeparrot/codeparrot-clean", "code", "python", text_field="content"),
    dc.HubTextSource("open-web-math/open-web-math", "math", "en"),
)


def _parquet(rows: list) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


def _document(kind: str, i: int) -> str:
    return f"{kind} document {i}: " + " ".join(f"{kind}{i}w{j}" for j in range(60))


@pytest.fixture(scope="module")
def hub_datasets(hub):
    """Three dataset repos with the real repos' ids, configs, file layouts and text fields."""
    card = (
        "---\nconfigs:\n"
        + "".join(
            f"- config_name: 20231101.{lang}\n  data_files:\n  - split: train\n    path: 20231101.{lang}/train-*\n"
            for lang in LANGUAGES
        )
        + "---\n# Wikipedia\n"
    )
    wiki = {"README.md": card.encode()}
    for lang in LANGUAGES:
        rows = [{"id": str(i), "url": f"https://{lang}.wikipedia.org/{i}", "title": f"T{i}",
                 "text": _document(f"wiki-{lang}", i)} for i in range(120)]  # fmt: skip
        wiki[f"20231101.{lang}/train-00000-of-00001.parquet"] = _parquet(rows)
    hub.seed_files("wikimedia/wikipedia", wiki, repo_type="dataset")
    code = "".join(json.dumps({"repo_name": "r", "path": f"f{i}.py", "content": _document("code", i)}) + "\n"
                   for i in range(150))  # fmt: skip
    hub.seed_files(
        "codeparrot/codeparrot-clean", {"file-000000000001.json.gz": gzip.compress(code.encode())}, repo_type="dataset"
    )
    math_rows = [{"url": f"u{i}", "text": _document("math", i), "date": "2023"} for i in range(150)]
    hub.seed_files(
        "open-web-math/open-web-math",
        {"data/train-00000-of-00001.parquet": _parquet(math_rows)},
        repo_type="dataset",
    )
    return SOURCES


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKSWAP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _bytes_by(dataset_dict, column):
    totals = {}
    for split in dataset_dict.values():
        for text, key in zip(split["text"], split[column]):
            totals[key] = totals.get(key, 0) + len(text.encode("utf-8"))
    return totals


def test_hub_streams_the_mix_within_the_budget(hub_datasets, own_cache):
    made = dc.default_corpus(60_000, seed=0, source="hub", sources=hub_datasets, test_fraction=0.2)
    assert made.origin.startswith("streamed from the Hub: wikimedia/wikipedia:20231101.en")
    by_domain = _bytes_by(made.dataset, "domain")
    total = sum(by_domain.values())
    assert 60_000 <= total <= 60_000 + 4 * 1_000  # each source stops at the document that crosses its budget
    for domain, share in DOMAIN_SHARES.items():
        assert abs(by_domain[domain] / total - share) < 0.05, by_domain
    assert set(_bytes_by(made.dataset, "source")) == {s.name for s in hub_datasets}
    assert set(made.dataset["train"]["language"]) == {"en", "de", "python"}


def test_hub_corpus_is_deterministic_for_a_seed(hub_datasets, tmp_path, monkeypatch):
    texts = []
    for run in ("a", "b", "c"):
        monkeypatch.setenv("TOKSWAP_CACHE", str(tmp_path / run))
        seed = 1 if run == "c" else 0
        made = dc.default_corpus(30_000, seed=seed, source="hub", sources=hub_datasets)
        texts.append(made.dataset["train"]["text"])
    assert texts[0] == texts[1]
    assert texts[0] != texts[2]


def test_whole_documents_are_held_out(hub_datasets, own_cache):
    made = dc.default_corpus(60_000, seed=0, source="hub", sources=hub_datasets, test_fraction=0.3)
    test_texts = made.dataset["test"]["text"]
    assert test_texts, "a 30% test fraction holds some documents out"
    # every held-out chunk starts a document (they are short enough to be one chunk) that is_test_text holds out
    for text in test_texts:
        assert is_test_text(text, 0.3)
    for text in made.dataset["train"]["text"]:
        assert not is_test_text(text, 0.3)


def test_a_streamed_corpus_is_cached(hub_datasets, own_cache, monkeypatch):
    first = dc.default_corpus(20_000, seed=0, source="hub", sources=hub_datasets)

    def no_streaming(*args, **kwargs):
        raise AssertionError("the cached corpus should have been used")

    monkeypatch.setattr("datasets.load_dataset", no_streaming)
    again = dc.default_corpus(20_000, seed=0, source="hub", sources=hub_datasets)
    assert again.dataset["train"]["text"] == first.dataset["train"]["text"]


def test_offline_mode_uses_the_package_built_corpus(hub_datasets, own_cache, monkeypatch, caplog):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level(logging.INFO, logger="tokswap"):
        made = dc.default_corpus(100_000, seed=0, source="auto", sources=hub_datasets)
    assert made.origin.startswith("tokswap.offline.corpus.build_corpus")
    assert "package-built" in caplog.text


def test_an_unreachable_endpoint_falls_back_with_a_log_line(hub_datasets, own_cache, monkeypatch, caplog):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    with caplog.at_level(logging.INFO, logger="tokswap"):
        made = dc.default_corpus(100_000, seed=0, source="auto", sources=hub_datasets)
    assert made.origin.startswith("tokswap.offline.corpus.build_corpus")
    assert "no Hub reachable" in caplog.text


def test_missing_repos_fall_back_in_auto_and_fail_clearly_in_hub(hub_datasets, own_cache, caplog):
    missing = (dc.HubTextSource("nobody/nothing-here", "multilingual", "en"),)
    with caplog.at_level(logging.WARNING, logger="tokswap"):
        made = dc.default_corpus(100_000, seed=0, source="auto", sources=missing)
    assert made.origin.startswith("tokswap.offline.corpus.build_corpus")
    assert "nobody/nothing-here" in caplog.text
    with pytest.raises(dc.DefaultCorpusError, match="streaming nobody/nothing-here from the Hub failed"):
        dc.default_corpus(100_000, seed=0, source="hub", sources=missing)


def test_an_unknown_source_is_refused():
    with pytest.raises(dc.DefaultCorpusError, match="auto, hub, offline"):
        dc.default_corpus(1_000, source="internet")
