"""The session service: transcripts, context assembly and pruning, the pre-compaction flush,
compaction and resets (``service``), with its HTTP routes (``api``) and client (``client``).

Importing this package registers the session jobs (they take ids, not events) with the bus.
"""

from memoryd.shared.runtime.bus import register_jobs

register_jobs({
    "flush": ("session", "memoryd.services.session.service.flush_job"),
    "compact": ("session", "memoryd.services.session.service.compact_job"),
    "session_memory": ("session", "memoryd.services.session.service.session_memory_job"),
    "heartbeat": ("session", "memoryd.services.session.heartbeat.heartbeat_job"),
})
