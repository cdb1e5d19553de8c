"""`modelplan store ls | verify | gc`."""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable

from executors.report import human_bytes
from executors.store import Store


def ls(store: Store, args: argparse.Namespace) -> int:
    entries = store.entries()
    total = 0
    for e in entries:
        size = store.size(e)
        total += size
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.manifest.get("created", 0)))
        print(f"{e.key[:12]}  {e.manifest.get('op', '?'):<10} {e.manifest.get('step', '?'):<12} "
              f"{human_bytes(size):>9}  {when}")
    print(f"{len(entries)} entries, {human_bytes(total)} in {store.root}")
    return 0


def verify(store: Store, args: argparse.Namespace) -> int:
    bad = 0
    entries = store.entries()
    for e in entries:
        found = store.verify(e)
        if found:
            bad += 1
            print(f"corrupt {e.key[:12]} ({e.manifest.get('step', '?')}): {'; '.join(found)}")
            if args.remove and not args.dry_run:
                store.remove(e.key)
                print(f"  removed {e.path}")
            elif args.remove:
                print(f"  would remove {e.path}")
    print(f"{len(entries)} entries checked, {bad} corrupt"
          + ("" if not bad or args.remove else "; `modelplan store verify --remove` deletes them"))
    return 1 if bad and (not args.remove or args.dry_run) else 0


def gc(store: Store, args: argparse.Namespace) -> int:
    recent = store.runs()[-args.keep_runs:] if args.keep_runs > 0 else []
    keep = {s["key"] for r in recent for s in r["steps"]}
    freed, removed = 0, 0
    for e in store.entries():
        if e.key not in keep:
            freed += store.size(e)
            removed += 1
            if not args.dry_run:
                store.remove(e.key)
    stale = store.stale_tmp()
    if not args.dry_run:
        for p in stale:
            shutil.rmtree(p, ignore_errors=True)
    verb = "would remove" if args.dry_run else "removed"
    print(f"gc {verb} {removed} entries ({human_bytes(freed)}) not used by the last "
          f"{len(recent)} run(s), and {len(stale)} stale temporary dir(s)")
    return 0


ACTIONS: dict[str, Callable[[Store, argparse.Namespace], int]] = {
    "ls": ls, "verify": verify, "gc": gc}
