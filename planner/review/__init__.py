"""Review tooling: plan and run diffs, plans at git revisions, pull-request comments."""
