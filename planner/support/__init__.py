"""Small helpers that import nothing of modelplan: any layer may use them (executors too)."""
