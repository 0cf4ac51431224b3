"""The query service's requests and answers: one set of pydantic models for HTTP, MCP and the CLI.

Field names on the wire are the seed's camelCase (``maxResults``, ``startLine``); ``from`` is
``from_`` in Python because ``from`` is a keyword. Optional fields that are unset are left
out of the JSON, so an ordinary answer is exactly SPEC §5's shape plus ``mode``.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from memoryd.shared import defaults as d

#: ``rrf``: the default, calibrated fusion (docs/query.md); ``weighted``: the seed's 0.7/0.3;
#: ``keyword`` and ``vector``: one side alone, for benchmarks and ``--explain``.
Fusion = Literal["rrf", "weighted", "keyword", "vector"]
#: What actually answered: both sides, or one because the other was unavailable or not asked for.
Mode = Literal["hybrid", "keyword-only", "vector-only"]



class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class SearchRequest(_Wire):
    query: str = Field(min_length=1, max_length=d.QUERY_MAX_CHARS)
    #: Unset = the agent's configured value.
    max_results: int | None = Field(None, ge=1, le=100)
    min_score: float | None = Field(None, ge=0, le=1)
    fusion: Fusion | None = None
    #: ``memory``, an extraPath's source name, or ``all`` (the default).
    source: str | None = Field(None, min_length=1, max_length=64)
    #: Only daily notes dated on or after / on or before this day (the date in the file name);
    #: files without a date (MEMORY.md, most extraPath files) are left out when either is set.
    after: dt.date | None = None
    before: dt.date | None = None
    #: Search the index as it was at this moment (ISO date or time, or a log sequence number),
    #: replayed from the agent's event log; unset = the live index.
    as_of: str | None = Field(None, min_length=1, max_length=64)
    explain: bool = False

    @model_validator(mode="after")
    def _window_not_empty(self) -> SearchRequest:
        if self.after and self.before and self.after > self.before:
            raise ValueError(f"after ({self.after}) is later than before ({self.before}); swap them")
        return self


class Explain(_Wire):
    """How a result's score came about (``--explain``); ``None`` = that side did not find it."""

    vector: float | None
    vector_rank: int | None
    text: float | None
    text_rank: int | None
    bm25: float | None
    fused: float
    #: What the fused score was multiplied by (source balance × temporal decay), when not 1.
    weight: float | None = None


class SupersededBy(_Wire):
    """The newer line that gives a new value for what this result states (services/query/supersede.py)."""

    path: str
    line: int


class SearchResult(_Wire):
    path: str
    start_line: int
    end_line: int
    score: float = Field(ge=0, le=1)
    snippet: str = Field(max_length=d.SNIPPET_MAX_CHARS)
    source: str
    explain: Explain | None = None
    superseded_by: SupersededBy | None = None


class SearchResponse(_Wire):
    results: list[SearchResult]
    provider: str
    model: str
    mode: Mode
    fusion: Fusion
    #: Why the answer is degraded (only when ``mode`` is not what was asked for).
    reason: str | None = None
    #: Something the caller should know about the answer (the agent's workspace folder is gone).
    warning: str | None = None
    #: Why this answer may be stale: no live node owns the agent now (services/query/placement.py).
    unavailable: str | None = None


class GetRequest(_Wire):
    path: str = Field(min_length=1, max_length=1024)
    from_: int = Field(1, ge=1, alias="from")
    #: Unset = to the end of the file (up to the read cap).
    lines: int | None = Field(None, ge=1)


class GetResponse(_Wire):
    path: str
    text: str
    #: Present only when the read was cut at the cap: where to continue, and why.
    truncated: bool | None = None
    next_from: int | None = None
    note: str | None = None


class AgentInfo(_Wire):
    id: str
    #: Not shown to an agent's own token (only to the admin token and on an open loopback server).
    workspace: str | None = None
    indexed: bool
    chunks: int | None = None


class AgentsResponse(_Wire):
    agents: list[AgentInfo]


def dump(model: BaseModel) -> dict:
    """The wire form: camelCase, unset optionals left out."""
    return model.model_dump(by_alias=True, exclude_none=True)
