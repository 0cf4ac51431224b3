"""One module per process: watcher, chunker, embedder, indexer, session, query (+ the CLI)."""
