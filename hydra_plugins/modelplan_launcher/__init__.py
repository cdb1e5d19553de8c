"""The modelplan Hydra launcher: `hydra/launcher=modelplan` plans every job of a multirun,
merges the plans into one DAG (sweep-CSE) and runs each unique step once."""
