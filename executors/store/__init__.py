"""The content-addressed store: entries built under a per-key lock (content), weight blobs (weights), leases that gc respects, full-disk checks (diskfull)."""
