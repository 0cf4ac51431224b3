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


def test_honcho_starts_the_procfile_and_a_new_note_is_searchable(tmp_path: Path) -> None:
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
               PYTHONUNBUFFERED="1")
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
    finally:
        os.killpg(honcho.pid, signal.SIGINT)
        try:
            honcho.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait(timeout=10)
        log.close()
    text = (tmp_path / "honcho.log").read_text(errors="replace")
    assert "private Redis at redis://127.0.0.1:" in text
    assert "memoryd worker chunk: Redis redis://127.0.0.1:" in text and "noted in" in text
    assert "chunked 1 files into 1 chunks" in text  # the workers' INFO line per job
    assert "HTTP API at http://127.0.0.1:" in text and "ready" in text
    assert not noted.exists()  # `memoryd redis` removed its note when it stopped
