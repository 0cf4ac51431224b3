"""What one edited line costs: chunks embedded and index rows rewritten, as JSON.

    python bench/edits.py [--positions 20]

A 2,000-line file — a log of one-line bullets (bench/pipeline.py's corpus), and notes with
headings and paragraphs — is chunked and written with the real ``Chunker`` and
``IndexWriter.replace_chunks`` (real SQLite and sqlite-vec, the hash provider's vectors).
Then one line is inserted, deleted (in the middle and at ``--positions`` other places) or
appended, and the new version written over the old:

- ``embedded``: chunks whose text is new — what the content-addressed embedding cache
  misses and the provider embeds;
- ``rows_rewritten``: chunk rows deleted and inserted (with their FTS entries and vectors);
- ``rows_moved``: rows that kept their text and vectors and only got new line numbers;
- ``rows_rewritten_keyed_by_lines``: what the seed's store, which matched rows by (hash,
  lines), rewrote for the same chunks (a moved row was deleted and inserted).

Each for the anchored chunker (shared/index/chunking.py) and the seed's fixed windows (reproduced
below as the baseline), both at the default 400/80 tokens.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memoryd.shared.config.loader import load_settings  # noqa: E402
from memoryd.shared.embed.providers import HashProvider  # noqa: E402
from memoryd.shared.events import ChunkData  # noqa: E402
from memoryd.shared.index.chunking import Chunker, encoding, sha256_text  # noqa: E402
from memoryd.shared.index.store import IndexWriter  # noqa: E402

LINES = 2000


def fixed_windows(chunker: Chunker, text: str) -> list[ChunkData]:
    """The seed's chunker: windows of whole lines up to ``tokens``, each next one starting
    ``overlap`` tokens back — so every boundary after an edit moves with it."""
    lines = text.split("\n")
    costs = [len(encoding().encode_ordinary(line)) + 1 for line in lines]
    chunks, start = [], 0
    while start < len(lines):
        end, total = start, costs[start]
        while end + 1 < len(lines) and total + costs[end + 1] <= chunker.tokens + 1:
            end += 1
            total += costs[end]
        body = "\n".join(lines[start:end + 1])
        chunks.append(ChunkData(hash=sha256_text(body), start_line=start + 1, end_line=end + 1, tokens=total - 1,
                                text=body))
        if end + 1 >= len(lines):
            break
        nxt, budget = end + 1, chunker.overlap
        while nxt - 1 > start and costs[nxt - 1] - 1 <= budget:
            budget -= costs[nxt - 1]
            nxt -= 1
        start = nxt
    return chunks


def bullets() -> list[str]:
    return [f"- 0007.{j:04d} decided to move service {j} of team 7 to the new cluster; owner person-{(7 * j) % 97}, "
            f"ticket OPS-{7000 + j}" for j in range(LINES)]


def notes() -> list[str]:
    rng = random.Random(3)
    vocabulary = ["deploy", "review", "latency", "budget", "rollback", "cluster", "database", "index", "agent",
                  "memory", "note", "decided", "because", "friday", "owner", "ticket", "migration", "cache"]
    out: list[str] = []
    while len(out) < LINES:
        if rng.random() < 0.15:
            out += [f"## Topic {len(out)}", ""]
        out += [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(6, 24))) for _ in range(rng.randint(1, 5))]
        out.append("")
    return out[:LINES]


def _rows(writer: IndexWriter) -> dict[int, tuple[int, int]]:
    return {cid: (s, e) for cid, s, e in writer.conn.execute("SELECT id, start_line, end_line FROM chunks")}


def cost(directory: Path, chunk: Callable[[str], list[ChunkData]], before: list[str], after: list[str]) -> dict:
    """Write ``before`` then ``after`` as one file; → what the second write embedded and rewrote."""
    provider = HashProvider()
    writer = IndexWriter(directory / f"{random.random():.12f}.sqlite")
    old = chunk("\n".join(before))
    for version in (old, chunk("\n".join(after))):
        if version is not old:
            rows = _rows(writer)
        vectors = {c.hash: m for c, m in zip(version, provider.embed_chunks([c.text for c in version]), strict=True)}
        with writer.transaction():
            writer.replace_chunks("memory/log.md", "memory", version, vectors)
    now = _rows(writer)
    writer.close()
    kept = rows.keys() & now.keys()
    rewritten = len(rows.keys() - kept) + len(now.keys() - kept)
    moved = sum(1 for cid in kept if rows[cid] != now[cid])
    # the seed's store matched rows by (hash, lines): a moved row was deleted and inserted again
    return {"embedded": len({c.hash for c in version} - {c.hash for c in old}), "rows_rewritten": rewritten,
            "rows_moved": moved, "rows_rewritten_keyed_by_lines": rewritten + 2 * moved}


def measure(directory: Path, positions: int) -> dict:
    chunker = Chunker()
    chunkers = {"anchored": chunker.chunk, "seed_fixed_windows": lambda text: fixed_windows(chunker, text)}
    rng = random.Random(1)
    report: dict = {"lines": LINES, "chunk_tokens": f"{chunker.tokens}/{chunker.overlap}"}
    for kind, lines in (("bullets", bullets()), ("notes", notes())):
        places = [LINES // 2] + rng.sample(range(1, LINES - 1), positions)
        new_line = "- inserted: the deploy freeze moves to Thursday, says OPS-9999"
        edits = {
            "insert": [lines[:i] + [new_line] + lines[i:] for i in places],
            "delete": [lines[:i] + lines[i + 1:] for i in places],
            "append": [[*lines, new_line]],
        }
        report[kind] = {}
        for name, chunk in chunkers.items():
            out = {}
            for edit, versions in edits.items():
                runs = [cost(directory, chunk, lines, after) for after in versions]
                middle = runs[0]
                out[edit] = {**middle, "embedded_max": max(r["embedded"] for r in runs),
                             "embedded_mean": round(float(np.mean([r["embedded"] for r in runs])), 2),
                             "rows_rewritten_max": max(r["rows_rewritten"] for r in runs), "positions": len(runs)}
            out["chunks"] = len(chunk("\n".join(lines)))
            report[kind][name] = out
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=20, help="random places edited besides the middle")
    args = parser.parse_args()
    load_settings(None)  # fail early on a broken environment
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(measure(Path(tmp), args.positions), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
