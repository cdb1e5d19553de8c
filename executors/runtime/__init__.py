"""Sessions and models: execution-provider adapters, the layered session cache, profiling and latency breakdowns, torch models, preprocessors."""
