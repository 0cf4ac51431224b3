"""The HTTP JSON API: routes, the OpenAPI schema, errors as JSON with a code, mounted routers."""

from __future__ import annotations

import json
import os

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient
from retrieval_set import build

from memoryd.services.query.http import create_app
from memoryd.shared.config.settings import Settings


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return build(tmp_path_factory.mktemp("http"), provider="hash")


@pytest.fixture(scope="module")
def client(settings: Settings):
    extra = APIRouter()

    @extra.get("/v1/ping-from-another-service")
    def ping() -> dict:
        return {"pong": True}

    with TestClient(create_app(settings, routers=[extra])) as c:
        yield c


def test_memory_search(client: TestClient) -> None:
    r = client.post("/v1/agents/main/memory_search", json={"query": "E-404", "maxResults": 2, "minScore": 0.5})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"results", "provider", "model", "mode", "fusion"}
    assert 1 <= len(body["results"]) <= 2
    assert set(body["results"][0]) == {"path", "startLine", "endLine", "score", "snippet", "source"}
    assert all(x["score"] >= 0.5 and "E-404" in x["snippet"] for x in body["results"])


def test_memory_search_with_fusion_source_and_explain(client: TestClient) -> None:
    r = client.post("/v1/agents/main/memory_search",
                    json={"query": "calendar sync down", "fusion": "weighted", "source": "kb", "explain": True,
                          "minScore": 0})
    body = r.json()
    assert body["fusion"] == "weighted"
    assert body["results"] and {x["source"] for x in body["results"]} == {"kb"}
    assert set(body["results"][0]["explain"]) >= {"vector", "text", "fused"}


def test_memory_get(client: TestClient) -> None:
    r = client.post("/v1/agents/main/memory_get", json={"path": "memory/2026-01-20.md", "from": 3, "lines": 1})
    assert r.status_code == 200
    assert r.json() == {"path": "memory/2026-01-20.md", "text": "## API Discussion"}


def test_agents_and_health(client: TestClient) -> None:
    agents = client.get("/v1/agents").json()["agents"]
    assert [(a["id"], a["indexed"]) for a in agents] == [("main", True)]
    assert agents[0]["chunks"] > 10
    assert client.get("/healthz").json() == {"status": "ok", "agents": 1, "pid": os.getpid()}


def test_openapi_schema_is_served(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert {"/v1/agents/{agent}/memory_search", "/v1/agents/{agent}/memory_get", "/v1/agents", "/healthz"} \
        <= set(schema["paths"])
    assert "maxResults" in schema["components"]["schemas"]["SearchRequest"]["properties"]


@pytest.mark.parametrize("method, url, body, status, code", [
    ("post", "/v1/agents/nobody/memory_search", {"query": "x"}, 404, "unknown_agent"),
    ("post", "/v1/agents/main/memory_get", {"path": "../etc/passwd.md"}, 403, "path_refused"),
    ("post", "/v1/agents/main/memory_get", {"path": "memory/2031-01-01.md"}, 404, "not_found"),
    ("post", "/v1/agents/main/memory_search", {"query": ""}, 422, "bad_request"),
    ("post", "/v1/agents/main/memory_search", {"query": "x", "maxResults": 0}, 422, "bad_request"),
    ("post", "/v1/agents/main/memory_search", {"query": "x", "surprise": 1}, 422, "bad_request"),
])
def test_errors_are_json_with_a_code(client: TestClient, method: str, url: str, body: dict, status: int,
                                     code: str) -> None:
    r = getattr(client, method)(url, json=body)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code and r.json()["error"]["message"]


def test_other_services_routers_are_mounted(client: TestClient) -> None:
    assert client.get("/v1/ping-from-another-service").json() == {"pong": True}


def _one_shape(r) -> dict:  # noqa: ANN001 - an httpx response
    """The error of ``r``: exactly ``{"error": {"code", "message"}}``, in the one serialization."""
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert r.content == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(), r.content
    assert r.headers["content-type"] == "application/json"
    return body["error"]


@pytest.mark.parametrize("method, url, body, status, code, says", [
    ("GET", "/v1/nothing-here", None, 404, "not_found", "no route GET /v1/nothing-here"),
    ("GET", "/nothing-at-all", None, 404, "not_found", "routes are listed at /docs"),
    ("GET", "/v1/agents/main/memory_search", None, 405, "method_not_allowed", "this route takes POST"),
    ("DELETE", "/v1/agents", None, 405, "method_not_allowed", "this route takes GET"),
    ("POST", "/v1/agents/nobody/memory_search", {"query": "x"}, 404, "unknown_agent", "unknown agent 'nobody'"),
    ("POST", "/v1/agents/main/memory_search", {}, 422, "bad_request", "query: Field required"),
])
def test_every_error_has_one_shape_and_one_serialization(client: TestClient, method: str, url: str,
                                                         body: dict | None, status: int, code: str, says: str) -> None:
    r = client.request(method, url, json=body)
    assert r.status_code == status
    error = _one_shape(r)
    assert error["code"] == code and says in error["message"], error
    if status == 405:
        assert r.headers["allow"]


def test_auth_refusals_are_serialized_as_every_other_error(settings: Settings) -> None:
    with TestClient(create_app(settings, require_token=True)) as guarded:
        r = guarded.post("/v1/agents/main/memory_search", json={"query": "x"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert _one_shape(r)["code"] == "unauthorized"
        r = guarded.post("/v1/agents/main/memory_search", json={"query": "x"}, headers={"Authorization": "Bearer no"})
        assert r.status_code == 401 and _one_shape(r)["code"] == "unauthorized"


@pytest.mark.parametrize("headers, sent", [({}, "no Content-Type header"),
                                           ({"Content-Type": "text/plain"}, "Content-Type: text/plain"),
                                           ({"Content-Type": "application/x-www-form-urlencoded"},
                                            "Content-Type: application/x-www-form-urlencoded")])
def test_a_json_body_without_the_json_content_type_names_the_header(client: TestClient, headers: dict[str, str],
                                                                    sent: str) -> None:
    r = client.post("/v1/agents/main/memory_search", content=b'{"query": "E-404"}', headers=headers)
    assert r.status_code == 422
    error = _one_shape(r)
    assert error["code"] == "bad_request" and "'Content-Type: application/json'" in error["message"], error
    assert f"(this request had {sent})" in error["message"] and "valid dictionary" not in error["message"]
