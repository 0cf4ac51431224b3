"""Code several stages share: events, configuration, the store, chunking, providers, the bus."""
