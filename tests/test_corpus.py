"""The mixed corpus: byte mix, determinism, a stable disjoint split, per-language held-out text.

Uses the real sources (fetched once into the tokswap cache by `tokswap.offline.assets`).
"""

import collections
import shutil

import pytest

from tokswap.offline import corpus as corpus_module
from tokswap.offline.corpus import (
    MAX_CHUNK_BYTES,
    CorpusError,
    build_corpus,
    chunk_document,
    heldout_by_language,
    is_test_text,
)
from tokswap.utils import cache_dir

SMALL = 1_200_000


def _bytes(text):
    return len(text.encode("utf-8"))


def _rows(dataset):
    return list(zip(dataset["text"], dataset["domain"], dataset["language"], dataset["source"]))


@pytest.fixture(scope="module")
def small_corpus():
    return build_corpus(total_bytes=SMALL, seed=0)


def test_chunking_keeps_paragraphs_and_utf8_whole():
    text = "\n\n".join(["短い段落。" * 30, "a" * 10, "word " * 1000, "Ω" * 3000])
    chunks = chunk_document(text, max_bytes=512, min_bytes=1)
    assert all(_bytes(c) <= 512 for c in chunks)
    assert "".join(c.replace(" ", "").replace("\n", "") for c in chunks) == text.replace(" ", "").replace("\n", "")
    assert chunk_document("para one\n\npara two", max_bytes=512, min_bytes=1) == ["para one\n\npara two"]


def test_markup_is_stripped():
    roff = '.TH LS 1\n.SH NAME\nls \\- list \\fBdirectory\\fR contents\n.\\" a comment\n.BR ls (1)\n.PP\nMore\\(emtext.'
    text = corpus_module._roff_to_text(roff)
    assert text == "NAME\n\nls - list directory contents\nls(1)\n\nMore-text."
    markup = '<head><title>x</title></head><div class="toc"><p>One &amp; <b>two</b></p></div><div class="para">Three <em>four</em></div>'
    assert corpus_module._html_blocks(markup, "p", div_classes=("para",)) == "One & two\n\nThree four"


@pytest.mark.slow
def test_mix_by_bytes_and_languages(small_corpus):
    rows = _rows(small_corpus["train"]) + _rows(small_corpus["test"])
    by_domain = collections.Counter()
    for text, domain, _, _ in rows:
        by_domain[domain] += _bytes(text)
    total = sum(by_domain.values())
    assert abs(total - SMALL) / SMALL < 0.05
    for domain, share in {"multilingual": 0.4, "code": 0.3, "math": 0.3}.items():
        assert abs(by_domain[domain] / total - share) < 0.03, (domain, by_domain[domain] / total)
    natural = {language for _, domain, language, _ in rows if domain == "multilingual"}
    assert {"en", "fr", "es", "de", "ja", "zh", "zh-hant", "ru", "ar", "ko", "hi", "th", "vi"} <= natural
    assert len(natural) >= 25
    code = {language for _, domain, language, _ in rows if domain == "code"}
    assert {"python", "rust", "java", "cpp"} <= code
    assert {language for _, domain, language, _ in rows if domain == "math"} == {"en"}
    assert {source for *_, source in rows} >= {
        "wikipedia",
        "debian-handbook",
        "man-pages",
        "udhr",
        "python-stdlib",
        "mbpp",
        "humaneval",
        "math",
        "gsm8k",
    }
    assert max(_bytes(text) for text, *_ in rows) <= MAX_CHUNK_BYTES
    assert len({text for text, *_ in rows}) == len(rows)  # no duplicate chunks


@pytest.mark.slow
def test_split_is_disjoint_stable_and_hash_defined(small_corpus):
    train, test = small_corpus["train"]["text"], small_corpus["test"]["text"]
    assert not set(train) & set(test)
    assert all(is_test_text(t) for t in test) and not any(is_test_text(t) for t in train)
    assert 0.005 < len(test) / (len(train) + len(test)) < 0.05
    # A corpus of another size and seed puts every text it shares with this one on the same side.
    other = build_corpus(total_bytes=SMALL // 2, seed=1)
    assert not set(other["train"]["text"]) & set(test)
    assert not set(other["test"]["text"]) & set(train)
    assert set(other["train"]["text"]) & set(train)  # they do share text


@pytest.mark.slow
def test_build_is_deterministic_and_cached(small_corpus):
    key = corpus_module._corpus_key(SMALL, 0, 0.02)
    first = {split: _rows(small_corpus[split]) for split in ("train", "test")}
    shutil.rmtree(cache_dir("corpus") / key)  # force a rebuild from the sources
    rebuilt = build_corpus(total_bytes=SMALL, seed=0)
    assert {split: _rows(rebuilt[split]) for split in ("train", "test")} == first
    assert (cache_dir("corpus") / key / "dataset_dict.json").exists()
    reseeded = build_corpus(total_bytes=SMALL, seed=1)
    assert _rows(reseeded["train"]) != first["train"]


def test_bad_arguments():
    with pytest.raises(CorpusError, match="total_bytes"):
        build_corpus(total_bytes=0)
    with pytest.raises(CorpusError, match="test_fraction"):
        build_corpus(total_bytes=1000, test_fraction=1.5)


@pytest.mark.slow
def test_heldout_by_language(small_corpus):
    heldout = heldout_by_language(max_docs_per_language=20)
    for key in ("en", "de", "fr", "es", "ja", "zh", "zh-hant", "ru", "ar", "ko", "vi", "hi", "th", "code", "math"):
        assert 5 <= len(heldout[key]) <= 20, key
    assert len(heldout) > 100  # UDHR articles 26-30 give a parallel held-out text in hundreds of languages
    assert len(heldout["en"]) == 20 and len(heldout["code"]) == 20
    train = set(small_corpus["train"]["text"])
    assert not any(text in train for texts in heldout.values() for text in texts)
    udhr_english = [t for t in heldout["en"] if t.startswith("Article 2")]
    assert udhr_english and not any(t.startswith("Article 26") for t in train)
    subset = heldout_by_language(max_docs_per_language=20, languages=["en", "math"])
    assert set(subset) == {"en", "math"} and subset["en"] == heldout["en"]


# ----------------------------------------------------------------------------------------------
# Corpus files given by the user
# ----------------------------------------------------------------------------------------------


def test_a_file_without_blank_lines_is_one_document_per_line(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("first document here\nsecond one\n\tthird, indented\n", encoding="utf-8")
    assert corpus_module.read_text_documents(path) == ["first document here", "second one", "\tthird, indented"]


def test_blank_lines_separate_paragraphs_of_several_lines(tmp_path):
    path = tmp_path / "paragraphs.txt"
    path.write_text("line one\nline two\n\n\nnext paragraph\n  \nlast\n", encoding="utf-8")
    assert corpus_module.read_text_documents(path) == ["line one\nline two", "next paragraph", "last"]


def test_a_huge_line_is_cut_into_bounded_pieces_at_spaces(tmp_path):
    words = [f"wörd{i}" for i in range(20_000)]
    path = tmp_path / "one_line.txt"
    path.write_text(" ".join(words) + "\n", encoding="utf-8")
    pieces = corpus_module.read_text_documents(path, max_document_bytes=4_000)
    assert len(pieces) > 20 and all(len(p.encode("utf-8")) <= 4_000 for p in pieces)
    assert " ".join(pieces).split() == words  # cut only at spaces: no word lost or split


def test_a_binary_file_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "data.txt"
    path.write_bytes(b"text\n\xff\xfe\x00binary\n")
    with pytest.raises(corpus_module.CorpusError, match="not UTF-8 text"):
        corpus_module.read_text_documents(path)


def test_alignment_and_training_read_one_document_per_line(tmp_path):
    from tokswap.align.pipeline import load_corpus
    from tokswap.training import load_training_dataset

    path = tmp_path / "dump.txt"
    path.write_text("".join(f"document number {i} with some words\n" for i in range(5)), encoding="utf-8")
    assert len(load_corpus(path)) == 5
    assert load_training_dataset(path)["text"] == [f"document number {i} with some words" for i in range(5)]


def _write(tmp_path, text, name="corpus.txt", newline=None):
    path = tmp_path / name
    with open(path, "w", encoding="utf-8", newline=newline) as handle:
        handle.write(text)
    return path


def test_blank_lines_at_the_start_or_end_separate_nothing(tmp_path):
    lines = ["The first document.", "  indented second one", "Третий документ.", "第四个文档。"]
    assert corpus_module.read_text_documents(_write(tmp_path, "\n\n" + "\n".join(lines) + "\n\n\n")) == lines
    assert corpus_module.read_text_documents(_write(tmp_path, "\n".join(lines))) == lines  # no final newline
    windows = _write(tmp_path, "\r\n".join(lines) + "\r\n\r\n", newline="")
    assert corpus_module.read_text_documents(windows) == lines
    assert not corpus_module.text_file_has_blank_lines(windows)
    assert corpus_module.text_file_has_blank_lines(_write(tmp_path, "a\n \nb\n"))


def test_a_huge_paragraph_without_spaces_is_cut_between_characters(tmp_path):
    text = "Ω" * 5000 + "\n\n" + "短い段落。" * 400 + "\n"
    documents = corpus_module.read_text_documents(_write(tmp_path, text), max_document_bytes=777)
    assert all(len(document.encode("utf-8")) <= 777 for document in documents)
    assert "".join(documents) == text.replace("\n", "")  # UTF-8 characters kept whole, nothing lost


def test_a_long_paragraph_is_cut_at_line_breaks_first(tmp_path):
    lines = [f"line {i} " + "x" * 50 for i in range(100)]
    path = _write(tmp_path, "intro\n\n" + "\n".join(lines) + "\n")
    documents = corpus_module.read_text_documents(path, max_document_bytes=1000)
    assert documents[0] == "intro"
    assert all(len(document.encode("utf-8")) <= 1000 for document in documents)
    assert "\n".join(documents[1:]).split("\n") == lines  # whole lines in every piece


def test_reading_a_huge_line_takes_bounded_memory(tmp_path):
    import tracemalloc

    path = tmp_path / "one-line.txt"
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(160):
            handle.write("lorem ipsum dolor " * 5_000)  # 90 KB at a time: 14 MB on one line, no newline
    tracemalloc.start()
    try:
        count = 0
        for document in corpus_module.iter_text_documents(path, max_document_bytes=256_000):
            assert len(document.encode("utf-8")) <= 256_000
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count >= 14_000_000 // 256_000
    assert peak < 4_000_000, f"peak {peak / 1e6:.1f} MB for a 14 MB line"


def test_training_files_get_the_same_documents_and_bound(tmp_path):
    from tokswap.training import load_training_dataset

    path = _write(tmp_path, "one document\nanother document\n\n")  # a trailing blank line separates nothing
    assert load_training_dataset(path)["text"] == ["one document", "another document"]
    path.write_text("edited\nfile\n", encoding="utf-8")  # an edited file is read again, not served from the cache
    assert load_training_dataset(path)["text"] == ["edited", "file"]
    huge = _write(tmp_path, "word " * 300_000 + "\nshort\n", name="huge.txt")  # a 1.5 MB line
    texts = load_training_dataset(huge)["text"]
    assert texts[-1] == "short" and len(texts) == 3
    assert all(len(text.encode("utf-8")) <= corpus_module.MAX_DOCUMENT_BYTES for text in texts)
