"""The docs stay true: every setting, command and event is documented; README matches CI."""

from __future__ import annotations

import argparse
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from memoryd.services.cli.app import build_parser
from memoryd.services.cli.up import services
from memoryd.shared import events
from memoryd.shared.config.settings import AgentEntry, Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))


def _setting_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        path = f"{prefix}.{field.alias or name}" if prefix else (field.alias or name)
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            paths += _setting_paths(sub, path)
        else:
            paths.append(path)
    return paths


def _quick_start_commands() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_readme_quick_start_has_exactly_two_one_line_commands() -> None:
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert "memoryd up" in commands[0] and "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    assert _quick_start_commands()[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", _setting_paths(Settings))
def test_every_setting_is_in_configuration_md(path: str) -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    short = path.split(".", 2)[-1] if path.startswith("agents.defaults.") else path
    short = short.removeprefix("memorySearch.")
    assert f"`{path}`" in doc or f"`{short}`" in doc, f"{path} is not documented in docs/configuration.md"


def test_every_agent_entry_field_is_documented() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name, field in AgentEntry.model_fields.items():
        assert f"agents.list[].{field.alias or name}" in doc


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, str | None]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                full = f"{prefix} {name}".strip()
                out.append((full, helps.get(name)))
                out += _commands(sub, full)
    return out


@pytest.mark.parametrize("command,help_text", _commands(build_parser()))
def test_every_command_has_help_and_a_docs_entry(command: str, help_text: str | None) -> None:
    assert help_text, f"`memoryd {command}` has no help text"
    assert f"memoryd {command}" in README + DOCS, f"`memoryd {command}` is not mentioned in README or docs/"


def test_every_event_type_is_in_events_md() -> None:
    doc = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    for member in typing.get_args(typing.get_args(events.AnyEvent)[0]):
        type_name = member.model_fields["type"].default
        assert f"`{type_name}`" in doc, f"{type_name} is not documented in docs/events.md"


def test_procfile_has_one_line_per_service_of_memoryd_up_and_a_redis_line() -> None:
    lines = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line.strip())
    assert lines.pop("redis") == "memoryd redis"  # what `memoryd up` starts itself when no Redis is configured
    assert {name: f"memoryd {' '.join(argv)}" for name, argv in services(http=True).items()} == lines


def test_the_readme_lists_every_http_route(make_settings, workspace: Path) -> None:
    from memoryd.services.query.http import create_app
    from memoryd.services.session import promote_api
    from memoryd.services.session.api import build_router

    settings, _ = make_settings(workspace)
    app = create_app(settings, routers=[build_router(settings), promote_api.build_router(settings)])  # as serve does
    routes = {f"{method.upper()} {path}" for path, methods in app.openapi()["paths"].items() for method in methods}
    listed = set(re.findall(r"^\| `((?:GET|POST|PUT|DELETE) /[^`]*)` \|", README, re.M))
    assert routes and listed == routes


def test_the_readme_says_how_to_upgrade_stop_and_remove_everything() -> None:
    from memoryd.shared.runtime.bus import queue_name

    section = README.split("## Upgrade, stop, remove", 1)[1].split("\n## ", 1)[0]
    assert "pip install -q -e ." in section and "Ctrl-C" in section and "rm -rf ~/.memoryd" in section
    assert "memoryd:<namespace>:*" in section and f"rq:queue:{queue_name('<namespace>', '*')}" in section
    redis = README.split("## Your own Redis, an OpenAI-compatible key", 1)[1].split("\n## ", 1)[0]
    assert "REDIS_URL=" in redis and "OPENAI_API_KEY=" in redis and "openai-compatible" in redis
