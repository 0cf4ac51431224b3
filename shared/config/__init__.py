"""Configuration: the settings model and its one loader (``settings``), the agent registry
(``registry``), an agent's workspace on disk (``workspace``, ``bootstrap``) and the bearer
tokens (``tokens``). Imports only the root of memoryd.shared."""
