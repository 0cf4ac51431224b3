"""What two or more memoryd processes use, by subject. Lowest layer first:

- the root: the contracts every layer may import — ``events`` (every event between stages),
  ``exceptions``, ``defaults`` (every tunable with its reason), ``redact`` and ``secrets``
  (what must never leave a process in the clear). They import nothing of memoryd.
- ``config/``: the settings, the agent registry, workspaces, tokens.
- ``embed/``: embedding providers, their breaker.
- ``index/``: the SQLite files — an agent's index, the content store — and the rules that write them.
- ``log/``: the event log and what folds it.
- ``runtime/``: Redis — the bus, workers, retries, the private Redis — and the live roster of agents.
- ``rebuild/``: an index made again from its log (materialize, side-by-side rebuild, replay, recovery).

A package imports only the root and the packages above it in this list (tests/test_layers.py).
Nothing here imports ``memoryd.services``.
"""
