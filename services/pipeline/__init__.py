"""The indexing pipeline, one module per process: watcher → chunker → embedder → indexer.

Stages talk only through events on the bus (``memoryd.shared.runtime.bus``); none imports another.
Importing this package registers the stages' jobs with the bus, so any process that emits to a
stage (the watcher, ``memoryd index``, a worker's follow-up) knows where the job runs.
"""

from memoryd.shared.runtime.bus import register_jobs

register_jobs({
    "chunk": ("chunk", "memoryd.services.pipeline.chunker.chunk_job"),
    "embed": ("embed", "memoryd.services.pipeline.embedder.embed_job"),
    "backfill": ("embed", "memoryd.services.pipeline.embedder.backfill_job"),
    "index": ("index", "memoryd.services.pipeline.indexer.index_job"),
    # a chunker's or embedder's output: logged by the agent's owner, then applied
    "record": ("index", "memoryd.services.pipeline.indexer.record_job"),
    # a live edit's chunk texts, keyword-searchable before the embedder answers
    "text": ("index", "memoryd.services.pipeline.indexer.text_job"),
    "fill": ("index", "memoryd.services.pipeline.indexer.fill_job"),
    # a side-by-side rebuild from the log, a slice at a time, on the index queue
    "rebuild": ("index", "memoryd.services.pipeline.rebuild.rebuild_job"),
})
