"""The session service: transcripts, context assembly and pruning, the pre-compaction flush,
compaction and resets (``service``), with its HTTP routes (``api``) and client (``client``)."""
