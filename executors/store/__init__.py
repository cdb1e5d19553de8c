"""The content-addressed store: entries built under a per-key lock (content), weight blobs (weights), leases that gc respects, publishing outputs, the `store` commands."""
