"""The CLI commands the local executor plugin adds to `modelplan` (the highest part: a command
may use any part below it)."""
