"""The indexing pipeline, one module per process: watcher → chunker → embedder → indexer.

Stages talk only through events on the bus (``memoryd.shared.bus``); none imports another.
"""
