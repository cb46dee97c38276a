"""Reading a user's plain-text corpus or training file: UTF-8 checked in bounded pieces, documents separated by
blank lines (or one per line when a file has none), documents over 1 MB cut at line breaks or spaces."""

from __future__ import annotations

from typing import Iterator, List, Tuple

from tokswap.errors import CorpusError

# A document longer than this is cut into pieces at line breaks or spaces before tokenizing: one 50 MB line
# would otherwise be tokenized (and its offsets held) as one sequence.
MAX_DOCUMENT_BYTES = 1_000_000


def _pieces(handle, max_chars: int) -> Iterator[str]:
    """The lines of an open text file, a line over `max_chars` characters in several pieces: never read whole."""
    while True:
        piece = handle.readline(max_chars)
        if not piece:
            return
        yield piece


def text_file_has_blank_lines(path, max_chars: int = MAX_DOCUMENT_BYTES) -> bool:
    """Whether a text file separates paragraphs with blank lines: a blank (or whitespace-only) line between two
    lines of text. Blank lines only before the first line or after the last one separate nothing. Streamed, and
    stops at the first separator."""
    seen_text = blank_pending = False
    at_line_start = True
    with open(path, encoding="utf-8", errors="replace") as handle:
        for piece in _pieces(handle, max_chars):
            if at_line_start and piece.endswith("\n") and not piece.strip():
                blank_pending = seen_text
            else:
                if blank_pending:
                    return True
                seen_text = True
            at_line_start = piece.endswith("\n")
    return False


def check_utf8_file(path, error_class=None, chunk_bytes: int = 1 << 20) -> None:
    """Refuse a text corpus that is not UTF-8 (a binary file, another encoding) before any model is loaded.

    Streams the file in chunks through an incremental decoder, so a large corpus costs no memory.

    Raises:
        `error_class` (default `CorpusError`) naming the file, the first bad byte and the fix.
    """
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(chunk_bytes):
                decoder.decode(chunk)
                offset += len(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as err:
        raise (error_class or CorpusError)(
            f"{path} is not UTF-8 text (byte {offset + err.start}: {err.reason}); give a UTF-8 .txt or .jsonl file."
        ) from None


def _cut(text: str, max_bytes: int) -> Tuple[str, str]:
    """(head of at most `max_bytes` UTF-8 bytes, rest) of a longer text: cut at the last line break or space of
    the head's second half when there is one (that character dropped), else between characters."""
    head = text.encode("utf-8", "surrogatepass")[:max_bytes].decode("utf-8", "ignore") or text[:1]
    cut = head.rfind("\n")
    if cut < len(head) // 2:
        cut = max(head.rfind(" "), head.rfind("\t"))
    if cut >= len(head) // 2:
        return text[:cut], text[cut + 1 :]
    return head, text[len(head) :]


class _Document:
    """The document being read, handed out in pieces of at most `max_bytes` as soon as it grows past that."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.parts: List[str] = []
        self.size = 0

    def add(self, text: str) -> Iterator[str]:
        self.parts.append(text)
        self.size += len(text.encode("utf-8", "surrogatepass"))
        while self.size > self.max_bytes:
            head, rest = _cut("".join(self.parts), self.max_bytes)
            self.parts, self.size = [rest], len(rest.encode("utf-8", "surrogatepass"))
            head = head.strip("\n")
            if head.strip():
                yield head

    def finish(self) -> Iterator[str]:
        text = "".join(self.parts).strip("\n")
        self.parts, self.size = [], 0
        if text.strip():
            yield text


def iter_text_documents(path, max_document_bytes: int = MAX_DOCUMENT_BYTES) -> Iterator[str]:
    """`read_text_documents`, one document at a time; memory stays bounded by `max_document_bytes` whatever the
    file holds (a 1 GB line included)."""
    if max_document_bytes < 1:
        raise CorpusError(f"max_document_bytes must be at least 1, not {max_document_bytes}.")
    by_line = not text_file_has_blank_lines(path, max_document_bytes)
    document = _Document(max_document_bytes)
    at_line_start = True
    offset = 0
    try:
        with open(path, encoding="utf-8") as handle:
            for piece in _pieces(handle, max_document_bytes):
                line_end = piece.endswith("\n")
                if by_line:
                    yield from document.add(piece[:-1] if line_end else piece)
                    if line_end:
                        yield from document.finish()
                elif at_line_start and line_end and not piece.strip():
                    yield from document.finish()
                else:
                    yield from document.add(piece)
                at_line_start = line_end
                offset += len(piece)
    except UnicodeDecodeError as err:
        raise CorpusError(
            f"{path} is not UTF-8 text (near character {offset}: {err.reason}); give a UTF-8 .txt or .jsonl corpus."
        ) from None
    yield from document.finish()


def read_text_documents(path, max_document_bytes: int = MAX_DOCUMENT_BYTES) -> List[str]:
    """The documents of a plain-text corpus file.

    A file with blank lines between its paragraphs holds one document per blank-line-separated paragraph; a file
    without any holds one document per line (the format of GloVe's and fastText's corpora and of most dumps).
    Blank lines only at the start or the end of a file do not count. A document longer than `max_document_bytes`
    is cut into pieces at line breaks, then spaces (between characters when it has neither), and the file is read
    a bounded piece at a time (`iter_text_documents`), so one huge line does not need its size in memory.

    Raises:
        `CorpusError` when the file is not UTF-8 text.
    """
    return list(iter_text_documents(path, max_document_bytes))
