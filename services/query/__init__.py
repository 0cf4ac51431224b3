"""The query service: ``memory_search`` / ``memory_get`` over HTTP, MCP and the CLI.

``engine`` answers; ``keyword``, ``vectors`` and ``fusion`` are its two sides and how they
are merged; ``models`` the request/response shapes; ``http`` and ``mcp`` the edges.
"""
