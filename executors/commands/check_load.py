"""The child process of `modelplan check`: open one graph on its target as a user would (no CPU
fallback) and print the load time as JSON; an exception is one line on stderr and exit 1."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(spec: dict) -> dict:
    from executors.runtime.adapters import adapter
    from executors.runtime.nativelog import native_log
    from planner.core.targets import named

    target = named(spec["target"])
    runtime = adapter(target)
    with native_log():  # the EP registered first: the time is the graph's own load
        so = runtime.session_options(target, spec["provider_options"], cpu_fallback=False)
        start = time.perf_counter()
        runtime.session(Path(spec["path"]), target, so=so)
    return {"load_s": round(time.perf_counter() - start, 3)}


if __name__ == "__main__":
    try:
        print(json.dumps(main(json.loads(sys.argv[1]))))
    except Exception as exc:  # noqa: BLE001 - one line for the parent
        sys.stderr.write(str(exc).strip().splitlines()[0] + "\n")
        sys.exit(1)
