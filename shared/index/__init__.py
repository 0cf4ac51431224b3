"""The SQLite files: an agent's index (``store``, ``schema``, ``fts``, the vector file ``vecfile`` /
``vecwriter`` / ``indexvectors``), the installation's content store (``content``), connections
(``sqlitedb``), how a file becomes chunks (``chunking``) and the one rule that writes an event into
an index (``apply``). Imports the root, ``config`` and ``embed``."""
