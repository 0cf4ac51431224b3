"""memoryd's processes: pipeline (watcher, chunker, embedder, indexer), query, session, and the CLI."""
