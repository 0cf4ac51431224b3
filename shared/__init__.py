"""What several processes use: events, configuration, the store, chunking, providers, the bus."""
