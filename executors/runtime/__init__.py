"""Sessions and models: execution-provider adapters, the layered session cache, ONNX Runtime's graph passes (ortopt), profiling and latency breakdowns, torch models."""
