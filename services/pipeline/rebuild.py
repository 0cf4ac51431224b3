"""Rebuild job: an agent's index built side by side from its log, one slice at a time.

Queued on the index queue by the indexer when the index's fingerprint is not the
configured one (and again by recovery if Redis lost it). Each run works for at most
``memoryd.log.rebuildSliceSeconds`` and queues its continuation behind the index jobs
that arrived meanwhile; the last one swaps the new index in. The work itself, its lock
and its checkpoints are ``memoryd.shared.rebuild.sidebyside``.
"""

from __future__ import annotations

from typing import Any

from memoryd.shared.exceptions import NotOwner
from memoryd.shared.rebuild.sidebyside import rebuild_slice
from memoryd.shared.runtime.worker import context


def rebuild_job(agent: str) -> dict[str, Any]:
    """RQ job: one slice of the agent's rebuild, on its owner (passed on there from any other
    node). Idempotent: a slice skips what is built."""
    ctx = context()
    ctx.ensure_agent(agent)
    try:
        ctx.bus.leases.token(agent)
    except NotOwner as exc:
        ctx.bus.enqueue("rebuild", agent, node=exc.owner)
        return {"done": False, "busy": False, "passed_to": exc.owner}
    result = rebuild_slice(ctx.settings, agent, budget=ctx.settings.memoryd.log.rebuild_slice_seconds)
    if not result["done"] and not result["busy"]:
        # the next slice, here, behind the index jobs queued meanwhile
        ctx.bus.enqueue("rebuild", agent, node=ctx.settings.node)
    return result
