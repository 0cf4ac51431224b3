"""Real MiniLM vectors for recall measurements: ~29k texts embedded once, cached on disk.

Texts: every line and paragraph of the repository's docs and test fixtures (daily notes,
knowledge-base files), the docstrings of Python's standard library split into paragraphs
and sentences — real English prose and notes, not random vectors. Embedded with the local
provider (``memoryd.shared.embed.providers`` ``local``); the matrix is cached under the cache dir
by a hash of the texts and the embedder, so only the first run pays (~8 minutes here).
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
import time
from pathlib import Path

import numpy as np

from memoryd.shared.config.settings import LocalSettings
from memoryd.shared.embed.providers import LocalProvider, local_embedder

REPO = Path(__file__).resolve().parent.parent


def texts() -> list[str]:
    found: list[str] = []
    files = sorted([*REPO.glob("tests/fixtures/**/*.md"), *REPO.glob("docs/*.md"), REPO / "README.md"])
    for path in files:
        for para in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            found += [line.strip(" -#*>|") for line in para.split("\n") if len(line.split()) >= 4]
            if len(para.split()) >= 8:
                found.append(para)
    stdlib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    for path in sorted([*stdlib.glob("*.py"), *stdlib.glob("*/*.py")]):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="ignore"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Module | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                for para in re.split(r"\n\s*\n", doc or ""):
                    para = " ".join(para.split())
                    if len(para.split()) >= 5:
                        found.append(para[:1000])
    found = list(dict.fromkeys(found))
    sentences = [s for t in found for s in _sentences(t)]
    return list(dict.fromkeys(t[:400] for t in found + sentences))


def _sentences(text: str) -> list[str]:
    parts = [s for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 5]
    return parts if len(parts) > 1 else []


def vectors(cache: Path, say=print) -> tuple[list[str], np.ndarray]:  # noqa: ANN001 - a progress callback
    """(texts, their MiniLM vectors): what ``cache`` holds (by sha256 of the text) is not embedded again."""
    corpus = texts()
    settings = LocalSettings()
    path = cache / f"real-{hashlib.sha256(local_embedder(settings).encode()).hexdigest()[:12]}.npz"
    known: dict[str, np.ndarray] = {}
    if path.exists():
        stored = np.load(path)
        known = dict(zip(stored["hashes"].tolist(), stored["vectors"], strict=True))
    keys = [hashlib.sha256(t.encode()).hexdigest() for t in corpus]
    todo = [i for i, k in enumerate(keys) if k not in known]
    if todo:
        provider = LocalProvider(settings)
        started = time.monotonic()
        for start in range(0, len(todo), 500):
            batch = todo[start:start + 500]
            for i, m in zip(batch, provider.embed_chunks([corpus[i] for i in batch]), strict=True):
                known[keys[i]] = m[0]
            say(f"embedded {start + len(batch)}/{len(todo)} real texts in {time.monotonic() - started:.0f} s")
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(path, hashes=np.array(list(known)), vectors=np.stack(list(known.values())))
    return corpus, np.stack([known[k] for k in keys]).astype(np.float32)
