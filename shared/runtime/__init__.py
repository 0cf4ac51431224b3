"""Redis and the processes around it: the bus that queues events for the stages (``bus``), the
worker loop every stage runs in (``worker``), the heartbeats that tell live processes from dead
ones (``liveness``), retries and their scheduler (``retries``), the private Redis
(``redis_server``), the survey of disk against index (``survey``) and the live roster of agents
(``roster``). Imports the root, ``config``, ``embed``, ``index`` and ``log``."""
