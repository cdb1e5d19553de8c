"""`modelplan store ls | verify | gc`: commands the local executor registers for its store."""

from __future__ import annotations

import argparse
import shlex
import shutil
import time
from collections.abc import Callable

from executors.run.proofs import PROOFS
from executors.store.content import Store
from executors.store.lease import gc_lock, held_keys
from planner.core.storelayout import QUARANTINE, store_root
from planner.errors import UsageError
from planner.support.units import human_bytes


def ls(store: Store, args: argparse.Namespace) -> int:
    entries = store.entries()
    total = 0
    for e in entries:
        size = store.size(e)
        total += size
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.manifest.get("created", 0)))
        print(f"{e.key[:12]}  {e.manifest.get('op', '?'):<10} {e.manifest.get('step', '?'):<12} "
              f"{human_bytes(size):>9}  {when}")
    quarantined = store.quarantined()
    print(f"{len(entries)} entries, {human_bytes(total)} in {store.root}"
          + (f"; {len(quarantined)} corrupt entr{'y' if len(quarantined) == 1 else 'ies'} "
             f"kept for inspection in {store.root / QUARANTINE} (store gc removes them)"
             if quarantined else ""))
    return 0


def verify(store: Store, args: argparse.Namespace) -> int:
    bad, seen = 0, {}
    entries = store.entries()
    for e in entries:
        found = store.verify(e, seen)
        if found:
            bad += 1
            print(f"corrupt {e.key[:12]} ({e.manifest.get('step', '?')}): {'; '.join(found)}")
            if args.remove and not args.dry_run:
                store.remove(e.key)
                print(f"  removed {e.path}")
            elif args.remove:
                print(f"  would remove {e.path}")
    corrupt_blobs = store.verify_pool(seen)
    for blob in corrupt_blobs:
        bad += 1
        print(f"corrupt weight blob {blob.name[:12]} in {store.pool}: content does not match "
              "its name")
        if args.remove and not args.dry_run:
            blob.unlink(missing_ok=True)
    again = f"modelplan store verify --remove --store {shlex.quote(str(store.root))}"
    print(f"{len(entries)} entries checked, {bad} corrupt"
          + ("" if not bad or args.remove else f"; `{again}` deletes them"))
    return 1 if bad and (not args.remove or args.dry_run) else 0


def gc(store: Store, args: argparse.Namespace) -> int:
    """Remove entries that neither the last --keep-runs runs used nor a running run holds
    (executors/store/lease.py), stale temporary dirs and quarantined entries."""
    recent = store.runs()[-args.keep_runs:] if args.keep_runs > 0 else []
    keep = {s["key"] for r in recent for s in r["steps"]}
    freed, removed, held_here = 0, 0, 0
    with gc_lock(store.root, exclusive=True):  # runs that start now wait until gc is done
        held, holders = held_keys(store.root)
        for e in store.entries():
            if e.key in held:
                held_here += 1
            elif e.key not in keep:
                freed += store.size(e)
                removed += 1
                if not args.dry_run:
                    store.remove(e.key)
        stale, quarantined = store.stale_tmp(), store.quarantined()
        if not args.dry_run:
            for p in stale + quarantined:
                shutil.rmtree(p, ignore_errors=True)
            shutil.rmtree(store.root / PROOFS, ignore_errors=True)  # re-made by the next check
        blobs, blob_bytes = store.drop_unreferenced_blobs(args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"gc {verb} {removed} entries ({human_bytes(freed)}) not used by the last "
          f"{len(recent)} run(s), {blobs} weight blob(s) no entry names "
          f"({human_bytes(blob_bytes)}), {len(stale)} stale temporary dir(s) and {len(quarantined)} "
          f"quarantined entr{'y' if len(quarantined) == 1 else 'ies'}; kept {held_here} "
          f"entr{'y' if held_here == 1 else 'ies'} held by {holders} running run(s)")
    return 0


ACTIONS: dict[str, Callable[[Store, argparse.Namespace], int]] = {
    "ls": ls, "verify": verify, "gc": gc}


def cmd_store(args: argparse.Namespace) -> int:
    root = store_root({"store": {"path": args.store}})
    if not root.is_dir():
        raise UsageError(f"store {root}: there is no store there; pass --store DIR of an "
                         "existing store (runs create one)")
    writes = args.action == "gc" or (args.remove and not args.dry_run)
    return ACTIONS[args.action](Store(root, writable=writes), args)


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def add_command(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    sp = sub.add_parser("store", parents=[common], help="inspect and maintain the store")
    sp.add_argument("action", choices=list(ACTIONS))
    sp.add_argument("--store", metavar="DIR", help="the store (default: the user cache dir)")
    sp.add_argument("--remove", action="store_true", help="verify: remove corrupt entries")
    sp.add_argument("--keep-runs", type=non_negative, default=10, metavar="N",
                    help="gc: keep entries used by the N most recent runs (default 10)")
    sp.add_argument("--dry-run", action="store_true",
                    help="gc and verify --remove: only say what would go")
    sp.set_defaults(handler=cmd_store)
