"""The corpus an alignment is computed on when the user gives none.

With the Hub reachable, it is streamed from open Hub datasets through `datasets` (`streaming=True`, nothing
downloaded whole), mixed as the paper mixes its sources: multilingual text (Wikipedia in eight languages), code
(Python) and math (web math pages), in the shares of `tokswap.offline.corpus.DOMAIN_SHARES`. Without a Hub
(`HF_HUB_OFFLINE=1`, or nothing answers at `HF_ENDPOINT`) the package-built corpus of `tokswap.offline.corpus` is
used, as it is when asked for by name (`source="offline"`, `tokswap align --default-corpus offline`).

Either way the result has the same shape: a `datasets.DatasetDict` with "train" and "test" splits and columns
`text`, `domain`, `language`, `source`, cut into chunks of at most 2 KB; a document and all its chunks go to the
same split. Streamed corpora are cached under the tokswap cache, keyed by the sources, size and seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from tokswap.errors import TokswapError
from tokswap.hub.download import hub_reachable
from tokswap.offline.corpus import DOMAIN_SHARES, build_corpus, chunk_document, is_test_text
from tokswap.utils import atomic_output_dir, cache_dir, get_logger

logger = get_logger(__name__)

SOURCES = ("auto", "hub", "offline")
_RECIPE = "hub-corpus-v1"  # bump when the streaming, chunking or splitting rules change


class DefaultCorpusError(TokswapError):
    """The default corpus could not be built as asked (the message says what to change)."""


@dataclass(frozen=True)
class HubTextSource:
    """One open, streamable Hub dataset the default corpus reads.

    Args:
        repo_id (`str`): the dataset repo, e.g. `"wikimedia/wikipedia"`.
        domain (`str`): `"multilingual"`, `"code"` or `"math"` (a key of `DOMAIN_SHARES`).
        language (`str`): the language (natural or programming) of its text.
        config (`str`, *optional*): the dataset config, e.g. `"20231101.en"`.
        text_field (`str`): the column holding the text.
        split (`str`): the split to stream.
    """

    repo_id: str
    domain: str
    language: str
    config: Optional[str] = None
    text_field: str = "text"
    split: str = "train"

    @property
    def name(self) -> str:
        return f"{self.repo_id}:{self.config}" if self.config else self.repo_id


# Open datasets (no gate, no loading script) in parquet or JSON lines, as the Hub serves them.
HUB_SOURCES: Tuple[HubTextSource, ...] = (
    *(
        HubTextSource("wikimedia/wikipedia", "multilingual", language, config=f"20231101.{language}")
        for language in ("en", "de", "fr", "es", "ru", "zh", "ja", "ar")
    ),
    HubTextSource("codeparrot/codeparrot-clean", "code", "python", text_field="content"),
    HubTextSource("open-web-math/open-web-math", "math", "en"),
)


@dataclass
class DefaultCorpus:
    """The default corpus and where it came from.

    Args:
        dataset (`datasets.DatasetDict`): "train" and "test" splits.
        origin (`str`): how it was made, for the alignment's provenance.
    """

    dataset: object
    origin: str


def default_corpus(
    total_bytes: int = 16_000_000,
    seed: int = 0,
    source: str = "auto",
    sources: Sequence[HubTextSource] = HUB_SOURCES,
    test_fraction: float = 0.02,
) -> DefaultCorpus:
    """The corpus `align_tokenizers` uses when it is given none.

    Args:
        total_bytes: size in UTF-8 bytes across both splits.
        seed: which documents are read and in which order. Same arguments, same corpus.
        source: `"hub"` (stream `sources`), `"offline"` (the package-built corpus) or `"auto"` (the Hub when one
            answers and `HF_HUB_OFFLINE` is not set; the package-built corpus otherwise, or when streaming fails).
        sources: the Hub datasets to stream.
        test_fraction: fraction of documents (by text hash) held out in the "test" split.
    """
    if source not in SOURCES:
        raise DefaultCorpusError(f"Unknown default corpus source {source!r}: use one of {', '.join(SOURCES)}.")
    if source == "offline":
        return DefaultCorpus(
            build_corpus(total_bytes, seed=seed, test_fraction=test_fraction),
            f"tokswap.offline.corpus.build_corpus(total_bytes={total_bytes}, seed={seed})",
        )
    if source == "auto" and not hub_reachable():
        logger.info("Default corpus: no Hub reachable (or HF_HUB_OFFLINE=1); using the package-built corpus.")
        return default_corpus(total_bytes, seed, "offline", test_fraction=test_fraction)
    try:
        return hub_corpus(total_bytes, seed, sources, test_fraction)
    except DefaultCorpusError as err:
        if source == "hub":
            raise
        logger.warning("Default corpus: %s Using the package-built corpus instead.", err)
        return default_corpus(total_bytes, seed, "offline", test_fraction=test_fraction)


def hub_corpus(
    total_bytes: int, seed: int = 0, sources: Sequence[HubTextSource] = HUB_SOURCES, test_fraction: float = 0.02
) -> DefaultCorpus:
    """Stream `sources` from the Hub into a cached corpus of about `total_bytes` (see `default_corpus`)."""
    import datasets

    if total_bytes <= 0:
        raise DefaultCorpusError(f"total_bytes must be positive, got {total_bytes}.")
    origin = f"streamed from the Hub: {', '.join(s.name for s in sources)} (total_bytes={total_bytes}, seed={seed})"
    final = cache_dir("corpus") / f"hub-{_cache_key(total_bytes, seed, sources, test_fraction)}"
    if not (final / "dataset_dict.json").exists():
        rows = _stream_mix(total_bytes, seed, sources, test_fraction)
        with atomic_output_dir(final, in_cache=True) as tmp:
            _as_dataset_dict(rows).save_to_disk(str(tmp))
        logger.info("Default corpus: %s, %d chunks, cached in %s.", origin, len(rows), final)
    return DefaultCorpus(datasets.load_from_disk(str(final)), origin)


def _cache_key(total_bytes: int, seed: int, sources: Sequence[HubTextSource], test_fraction: float) -> str:
    from huggingface_hub import constants

    recipe = [_RECIPE, constants.ENDPOINT, total_bytes, seed, test_fraction, DOMAIN_SHARES]
    recipe.append([dataclasses.asdict(s) for s in sources])
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:20]


def _stream_mix(total_bytes: int, seed: int, sources: Sequence[HubTextSource], test_fraction: float) -> List[tuple]:
    """`(text, domain, language, source, split)` chunks: each domain's share of the bytes, split evenly between
    its sources, in a seeded order."""
    rows: List[tuple] = []
    for domain, share in DOMAIN_SHARES.items():
        domain_sources = [s for s in sources if s.domain == domain]
        if not domain_sources:
            logger.warning("Default corpus: no Hub source for the %s domain.", domain)
        for text_source in domain_sources:
            budget = int(total_bytes * share / len(domain_sources))
            rows.extend(_stream_source(text_source, budget, seed, test_fraction))
    random.Random(f"{seed}:order").shuffle(rows)
    if not rows:
        raise DefaultCorpusError("the Hub sources gave no text.")
    return rows


def _stream_source(text_source: HubTextSource, budget: int, seed: int, test_fraction: float) -> List[tuple]:
    """Chunks of whole documents from one source until `budget` bytes, in a seeded shuffle of the stream."""
    import datasets

    try:
        stream = datasets.load_dataset(
            text_source.repo_id, text_source.config, split=text_source.split, streaming=True
        ).shuffle(seed=seed, buffer_size=1_000)
        rows, size = [], 0
        for record in stream:
            text = record.get(text_source.text_field)
            if not isinstance(text, str) or not text.strip():
                continue
            split = "test" if is_test_text(text, test_fraction) else "train"  # a whole document, all its chunks
            for chunk in chunk_document(text):
                rows.append((chunk, text_source.domain, text_source.language, text_source.name, split))
                size += len(chunk.encode("utf-8"))
            if size >= budget:
                break
    except Exception as err:  # noqa: BLE001 - any failure to stream is reported as one line naming the source
        raise DefaultCorpusError(
            f"streaming {text_source.name} from the Hub failed ({type(err).__name__}: {err})."
        ) from err
    if size < budget:
        logger.warning("Default corpus: %s holds only %d of the %d bytes asked.", text_source.name, size, budget)
    return rows


def _as_dataset_dict(rows: Sequence[tuple]):
    import datasets

    columns = ("text", "domain", "language", "source")
    features = datasets.Features({name: datasets.Value("string") for name in columns})
    splits = {}
    for split in ("train", "test"):
        kept = [row for row in rows if row[4] == split]
        if not kept and split == "test":
            continue  # a small corpus may hold nothing out; the pipeline then holds out documents itself
        splits[split] = datasets.Dataset.from_dict(
            {name: [row[i] for row in kept] for i, name in enumerate(columns)}, features=features
        )
    return datasets.DatasetDict(splits)
