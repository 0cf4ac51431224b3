"""Rebuild job: an agent's index built side by side from its log, one slice at a time.

Queued on the index queue by the indexer when the index's fingerprint is not the
configured one (and again by recovery if Redis lost it). Each run works for at most
``memoryd.log.rebuildSliceSeconds`` and queues its continuation behind the index jobs
that arrived meanwhile; the last one swaps the new index in. The work itself, its lock
and its checkpoints are ``memoryd.shared.rebuild.sidebyside``.
"""

from __future__ import annotations

from typing import Any

from memoryd.shared.rebuild.sidebyside import rebuild_slice
from memoryd.shared.runtime.worker import context


def rebuild_job(agent: str) -> dict[str, Any]:
    """RQ job: one slice of the agent's rebuild. Idempotent: a slice skips what is built."""
    ctx = context()
    ctx.ensure_agent(agent)
    result = rebuild_slice(ctx.settings, agent, budget=ctx.settings.memoryd.log.rebuild_slice_seconds)
    if not result["done"] and not result["busy"]:
        ctx.bus.enqueue("rebuild", agent)  # the next slice, behind the index jobs queued meanwhile
    return result
