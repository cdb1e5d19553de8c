"""Config loading: composing the Hydra tree (packaged or a user's), validating it against schemas/config.schema.json, and where each value came from."""
