"""``memoryd status`` for a person: which config and Redis, then a table per agent and stage.

The data is the same dict ``--json`` prints (services/cli/status.py builds it); this
module only draws it, with ``rich`` (plain text when stdout is not a terminal).
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table

from memoryd.services.cli.running import running_up
from memoryd.services.cli.text import plural
from memoryd.shared.config.settings import Settings
from memoryd.shared.redact import redact
from memoryd.shared.runtime import redis_server

STATE_TITLES = {"pending": "pending", "started": "running", "scheduled": "retrying", "failed": "failed"}


def redis_choice(settings: Settings) -> dict[str, str]:
    """The Redis a command uses and why (shared/runtime/redis_server.py's rule)."""
    url, why, _ = redis_server.choose(settings)
    return {"url": redact(url), "why": why}


def config_choice(settings: Settings) -> dict[str, str | None]:
    """The config file in use and where it came from."""
    running, up_config = running_up(settings.state_dir)
    if settings.source_file is None:
        return {"file": None, "why": "none: defaults, the environment and the agent registry"}
    if running and up_config == settings.source_file:
        return {"file": settings.source_file, "why": "the config of the running memoryd up"}
    return {"file": settings.source_file, "why": "--config or $MEMORYD_CONFIG"}


def _ago(when: float | None) -> str:
    if not when:
        return "never"
    seconds = max(time.time() - when, 0)
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def render_status(data: dict[str, Any], out: IO[str] | None = None) -> None:
    console = Console(file=out or sys.stdout, highlight=False, soft_wrap=True)
    config, redis = data["config"], data["redis"]
    console.print(f"config  {config['file'] or '-'}  ({config['why']})")
    console.print(f"redis   {redis['url']}  ({redis['why']})")
    console.print(f"state   {data['state_dir']}")
    _running(console, data["running"])
    queues = data["queues"]
    if "error" in queues:
        console.print(f"[red]queues unknown: {queues['error']}[/red]")
    for run in data.get("index_runs", []):
        console.print(f"memoryd index run {run['run'][:8]} (agent {run['agent']}): {run['files_done']}/{run['files']} "
                      f"files done, {run['chunks_embedded']}/{run['chunks']} chunks embedded, "
                      f"started {_ago(run['started'])}")
    for agent_id, agent in data["agents"].items():
        console.print()
        _agent(console, agent_id, agent, queues)


def _running(console: Console, running: dict[str, Any]) -> None:
    """What runs: said plainly when nothing does, so idle queues are not read as a healthy pipeline."""
    if running["nothing"]:
        console.print("running [red]nothing: no memoryd up, no workers, no HTTP server on this state dir[/red] "
                      "(start them with `memoryd up`)")
        return
    console.print(f"running memoryd up (pid {running['up_pid']})" if running["up_pid"] else "running no memoryd up")
    console.print(f"server  {running['server'] or 'none'}")
    if running["workers"] is None:
        return  # Redis unreachable: the workers are unknown (said with the queues)
    for stage, workers in running["workers"].items():
        said = ", ".join(f"pid {w['pid']} on {w['host']} ({w['state']}, heartbeat {_ago(w['last_heartbeat'])})"
                         for w in workers)
        console.print(f"worker  {stage:<8}{said or '[red]none[/red]'}")


def _agent(console: Console, agent_id: str, agent: dict[str, Any], queues: dict[str, Any]) -> None:
    missing = "  [red]MISSING: the folder does not exist[/red]" if agent.get("workspace_missing") else ""
    console.print(f"[bold]agent {agent_id}[/bold]  workspace {agent['workspace']}{missing}")
    if agent.get("unavailable"):
        console.print(f"  owner   [red]none: {agent['unavailable']}[/red]")
    elif agent.get("owner"):
        console.print(f"  owner   node {agent['owner']}")
    index = agent["index"]
    if index is None:
        console.print("  index   none yet (`memoryd index --agent " + agent_id + "`)")
    elif "error" in index:
        console.print(f"  index   [red]{index['error']}[/red]")
    else:
        without = index.get("chunks_without_vectors", 0)
        console.print(f"  index   {plural(index.get('files', 0), 'file')}, {plural(index.get('chunks', 0), 'chunk')}"
                      + (f", {without} without vectors" if without else "")
                      + f"; embedder {index.get('embedder') or '-'}")
        for skipped in index.get("skipped", []):
            console.print(f"  skipped {skipped.get('path')}: {skipped.get('reason') or skipped.get('error')}")
    console.print(f"  provider {agent['provider']}" + (f" ({agent['model']})" if agent.get("model") else ""))
    if agent.get("model_choice"):
        console.print(f"           {agent['model_choice']}")
    error = queues.get("provider_errors", {}).get(agent_id) if "error" not in queues else None
    if error:
        console.print(f"  [red]provider error {_ago(error.get('at'))}: {error.get('error')}[/red]")
    if "error" not in queues:
        console.print(f"  watcher last reconciled {_ago(queues.get('watcher_last_reconcile', {}).get(agent_id))}")
    if agent.get("queues"):
        table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), show_edge=False)
        table.add_column("stage")
        for title in STATE_TITLES.values():
            table.add_column(title, justify="right")
        for stage, counts in agent["queues"].items():
            table.add_row(stage, *(str(counts.get(state, 0)) for state in STATE_TITLES))
        console.print(Padding(table, (0, 0, 0, 2)))
    for state in ("scheduled", "failed"):
        for job in agent.get(f"{state}_jobs", []):
            console.print(f"  [red]{STATE_TITLES[state]} job {job['id']} ({job['stage']}): {job.get('error')}[/red]")
