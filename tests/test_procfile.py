"""The Procfile runs as the README says: ``honcho start`` with the venv's ``bin`` on the PATH and
no Redis configured or running — its ``redis`` line starts a private one the services find.
A file written to the workspace is then found by ``memoryd search``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _honcho(tmp_path: Path, **extra_env: str) -> tuple[str, Path]:
    """Run the Procfile under honcho until a new note is found by `memoryd search`, stop it with
    Ctrl-C; → (honcho's log, the Redis note's path)."""
    workspace = tmp_path / "clawd"
    (workspace / "memory").mkdir(parents=True)
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": "hash", "sync": {"watchDebounceMs": 200}}},
                   "list": [{"id": "main", "workspace": str(workspace)}]},
        "memoryd": {"server": {"port": free_port()}},
    }))
    shutil.copy(ROOT / "Procfile", tmp_path / "Procfile")
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", MEMORYD_CONFIG=str(config),
               PYTHONUNBUFFERED="1", **extra_env)
    env.pop("REDIS_URL", None)
    log = (tmp_path / "honcho.log").open("wb")
    honcho = subprocess.Popen([str(BIN / "honcho"), "start"], cwd=tmp_path, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)

    def search() -> list[dict]:
        out = subprocess.run([str(BIN / "memoryd"), "search", "procfile-zebra", "--json"], env=env,
                             capture_output=True, text=True, timeout=60)
        return json.loads(out.stdout)["results"] if out.returncode == 0 else []

    try:
        noted = Path(os.environ["MEMORYD_STATE_DIR"]) / "redis" / "url"
        wait_until(noted.exists, timeout=60, what="`memoryd redis` to note its Redis")
        (workspace / "memory" / "2026-04-01.md").write_text("- the procfile-zebra decision: ship on Friday\n")
        hits = wait_until(search, timeout=120, interval=0.5, what="the note to be indexed and found")
        assert hits[0]["path"] == "memory/2026-04-01.md"
        status = json.loads(subprocess.run([str(BIN / "memoryd"), "status", "--json"], env=env, capture_output=True,
                                           text=True, timeout=60, check=True).stdout)
        assert "memoryd up" not in status["redis"]["why"] and "by memoryd redis (pid" in status["redis"]["why"]
        assert status["running"]["upPid"] is None and status["running"]["server"].startswith("http://127.0.0.1:")
        assert all(status["running"]["workers"][stage] for stage in ("chunk", "embed", "index", "session"))
    finally:
        os.killpg(honcho.pid, signal.SIGINT)
        try:
            honcho.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait(timeout=10)
        log.close()
    return (tmp_path / "honcho.log").read_text(errors="replace"), noted


def _alarms(text: str) -> list[str]:
    return [line for line in text.splitlines() if " ERROR " in line or " WARNING " in line or "Traceback" in line]


def test_honcho_starts_the_procfile_and_a_new_note_is_searchable(tmp_path: Path) -> None:
    text, noted = _honcho(tmp_path)
    assert "private Redis at redis://127.0.0.1:" in text
    assert "memoryd worker chunk: Redis redis://127.0.0.1:" in text and "noted in" in text
    assert "chunked 1 files into 1 chunks" in text  # the workers' INFO line per job
    assert "HTTP API at http://127.0.0.1:" in text and "ready" in text
    assert not noted.exists()  # `memoryd redis` removed its note when it stopped
    assert _alarms(text) == []  # a clean stop: the workers leave before the private Redis does


def test_honcho_uses_an_existing_redis_as_up_does(tmp_path: Path, redis_url: str) -> None:
    """Item 4 of issue 22: with a Redis answering at the local address (here the tests' server as
    memoryd.localRedisUrl), the Procfile's `memoryd redis` uses it, as `memoryd up` does, and
    starts none; the workers say who noted it and why."""
    text, noted = _honcho(tmp_path, MEMORYD_LOCAL_REDIS_URL=redis_url)
    assert "private Redis at" not in text
    assert f"memoryd redis: using {redis_url} (none configured or noted" in text and "existing Redis answering" in text
    assert f"memoryd worker chunk: Redis {redis_url} (noted in" in text and "chosen by memoryd redis (pid" in text
    assert not noted.exists()
    assert _alarms(text) == []
