"""compose/ as this machine and the README need it, read from the files (bench/compose.sh runs it for real):
host networking on loopback, a healthcheck for every service, start once Redis is healthy,
Redis with AOF and a password, neither state nor workspaces for the chunker and embedder, a build context
without the venv."""

from __future__ import annotations

from pathlib import Path

import yaml

from memoryd.shared.runtime import bus as busmod

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES = COMPOSE["services"]


def test_every_service_uses_the_hosts_network_publishes_nothing_and_has_a_healthcheck() -> None:
    for name, service in SERVICES.items():
        assert service["network_mode"] == "host", name
        assert "ports" not in service, name
        assert service["healthcheck"]["test"], name


def test_memoryd_services_start_once_redis_is_healthy_and_workers_check_their_own_heartbeat() -> None:
    for name, service in SERVICES.items():
        if name == "redis":
            continue
        assert service["depends_on"] == {"redis": {"condition": "service_healthy"}}, name
        command = service["command"]
        if command[:2] == ["memoryd", "worker"]:
            assert service["healthcheck"]["test"] == ["CMD", "memoryd", "health", "--stage", command[2]], name
    workers = {s["command"][2] for s in SERVICES.values() if s["command"][:2] == ["memoryd", "worker"]}
    assert workers == set(busmod.STAGES)


def test_redis_keeps_an_append_only_file_needs_a_password_and_stays_off_6379() -> None:
    command = " ".join(SERVICES["redis"]["command"])
    assert "--appendonly yes" in command and "--requirepass" in command and "--bind 127.0.0.1" in command
    assert "6379" not in command
    assert "MEMORYD_REDIS_PASSWORD" in SERVICES["watcher"]["environment"]["REDIS_URL"]


def test_the_chunker_and_embedder_mount_neither_the_state_nor_the_workspaces() -> None:
    assert not any(v.startswith("state:") for v in SERVICES["redis"]["volumes"])
    for stateless in ("chunker", "embedder"):
        assert not any(v.startswith("state:") or ":/workspaces" in v for v in SERVICES[stateless]["volumes"])
    for stateful in ("watcher", "indexer", "session", "query"):
        assert "state:/state" in SERVICES[stateful]["volumes"]


def test_the_build_context_leaves_out_the_venv_and_git() -> None:
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert ".venv" in ignored and ".git" in ignored
    dockerfile = (ROOT / "compose" / "Dockerfile").read_text(encoding="utf-8")
    assert "ARG BASE_IMAGE=python:3.11-slim" in dockerfile and "--no-index" in dockerfile
    assert "\nUSER memoryd\n" in dockerfile
