"""The event log: an agent's append-only record of what the pipeline did (``eventlog``), its fold
into the state of each file (``fold``) and the checkpoints that keep folds short (``checkpoints``).
Imports the root, ``config`` and ``index``."""
