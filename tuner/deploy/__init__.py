"""``tuner launch``'s choice of configuration: from the local store, or asked of a tuner API."""
