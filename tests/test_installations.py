"""One Redis, several installations: every queue and key carries the installation's namespace
(derived from its state dir), so two sets of real workers on one redis-server each index
only their own files. And Redis URLs with a password, over TLS too (``rediss://``), work
without the password ever appearing in what memoryd prints or logs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import SimpleWorker

from memoryd.shared.config.loader import load_settings
from memoryd.shared.runtime.bus import STAGES
from memoryd.shared.runtime.redis_server import redis_binary
from tests.pipeline_harness import Pipeline, wait_until
from tests.support import free_port

pytestmark = pytest.mark.integration


def _installation(root: Path, words: str, redis_url: str) -> Pipeline:
    """A state dir, a config and a workspace of its own; the agent is called ``main`` in both."""
    workspace = root / "workspace"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "MEMORY.md").write_text(f"# {root.name}\n{words} at start\n", encoding="utf-8")
    config = root / "memoryd.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": "hash", "sync": {"watchDebounceMs": 200}}},
                   "list": [{"id": "main", "workspace": str(workspace)}]},
        "memoryd": {"stateDir": str(root / "state"), "redisUrl": redis_url},
    }), encoding="utf-8")
    return Pipeline(config, redis_url, load_settings(config), root)


def _live(p: Pipeline) -> None:
    p.start()
    wait_until(lambda: p.conn.hget(p.bus.key("reconciled"), "main"), timeout=60, what="the first reconcile")


def test_two_installations_on_one_redis_never_take_each_others_jobs(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORYD_STATE_DIR")  # each installation's config names its own state dir
    one = _installation(tmp_path / "one", "alphaword", redis_url)
    two = _installation(tmp_path / "two", "betaword", redis_url)
    assert one.bus.namespace != two.bus.namespace
    try:
        _live(one)
        _live(two)
        for p, word in ((one, "alphaword"), (two, "betaword")):
            for i in range(20):  # enough jobs that both sets of workers are busy at once
                (p.settings.agent("main").workspace / "memory" / f"2026-05-{i + 1:02d}.md").write_text(
                    f"{word} note {i}\n", encoding="utf-8")
        for p, mine, theirs in ((one, "alphaword", "betaword"), (two, "betaword", "alphaword")):
            wait_until(lambda p=p, mine=mine: len(p.keyword("main", mine)) == 21, timeout=60,
                       what=f"{mine} indexed by its own installation")
            assert p.keyword("main", theirs) == []
        for p in (one, two):
            own = {str(proc.pid) for proc in p.procs.values()}
            for stage in STAGES[:3]:
                for queue in p.bus.lanes(stage):
                    pids = {str(w.pid) for w in SimpleWorker.all(queue=queue)}
                    assert pids and pids <= own, (stage, pids, own)  # only its own workers listen there
            applied = {e.path for e in p.events("main", "index.applied")}
            assert applied == {"MEMORY.md", *(f"memory/2026-05-{i + 1:02d}.md" for i in range(20))}
    finally:
        one.stop()
        two.stop()


@pytest.fixture(params=["redis", "rediss"])
def protected_redis(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test that wants a password (and, for ``rediss``, TLS only); → its URL."""
    password = "s3cret-" + "x" * 12
    port = free_port()
    args = [redis_binary() or "redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--requirepass", password, "--dir", str(tmp_path)]
    query = ""
    if request.param == "rediss":
        cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True, timeout=60)
        args += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                 "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]
        query = f"?ssl_ca_certs={cert}"
    else:
        args += ["--port", str(port)]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"{request.param}://:{password}@127.0.0.1:{port}/0{query}"
    try:
        wait_until(lambda: _pings(url), timeout=30, what="the protected redis-server")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url).ping())
    except redis.RedisError:
        return False


def test_a_password_protected_redis_works_and_the_password_is_never_shown(
        tmp_path: Path, protected_redis: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORYD_STATE_DIR")
    password = protected_redis.split(":")[2].split("@")[0]
    p = _installation(tmp_path / "inst", "gammaword", protected_redis)
    try:
        _live(p)
        (p.settings.agent("main").workspace / "memory" / "2026-06-01.md").write_text("gammaword later\n")
        wait_until(lambda: len(p.keyword("main", "gammaword")) == 2, timeout=60, what="the edit indexed")
        shown = [p.cli("--config", str(p.config), "status", "--json").stdout,
                 p.cli("--config", str(p.config), "index", "--agent", "main", "--json").stdout,
                 p.cli("--config", str(p.config), "doctor", "--json", check=False).stdout]
        assert json.loads(shown[1])["redis"].startswith(protected_redis.split("://")[0] + "://:***@")
        wrong = protected_redis.replace(password, "not-the-password")
        bad = _installation(tmp_path / "bad", "deltaword", wrong)
        failed = bad.cli("--config", str(bad.config), "index", "--agent", "main", check=False)
        assert failed.returncode != 0 and "***" in failed.stderr
        shown.append(failed.stderr)
    finally:
        p.stop()
    assert not any(password in text or "not-the-password" in text for text in [*shown, p.logs()])
