"""Which tests share an xdist worker under `--dist loadgroup` (`make test`): the tests of one
`xdist_group` mark, and the tests of a module that use one of its module-scoped fixtures.

`loadgroup` hands ungrouped tests out one at a time, so a module's tests land on both workers
and each worker would make the module's fixture again: a build, an imported recipe tree, the
README's workspace (whose commands run in order up to the test's). Grouped, the fixture is made
once and the other worker runs other tests meanwhile."""

from __future__ import annotations

import pytest

try:
    from _pytest.nodeid import NodeId  # pytest >= 9
except ImportError:  # pytest 8: pytest-xdist's own suffix works
    NodeId = None

SHARED_SCOPES = ("module", "class")


def group_module_fixture_users(items: list[pytest.Item]) -> None:
    """Mark each test that uses a module- or class-scoped fixture and names no group of its
    own with its module's group (the module's file name)."""
    for item in items:
        if next(item.iter_markers("xdist_group"), None) is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        chains = info.name2fixturedefs.values() if info is not None else ()
        if any(d.scope in SHARED_SCOPES for chain in chains for d in chain):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


def assign(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests, then give each grouped test the `@group` suffix `loadgroup` reads.
    pytest-xdist (3.8) sets the suffix on `item._nodeid`, which pytest 9 no longer reads (a
    test's id is `item._id`), so its groups were ignored: the suffix is set here."""
    if NodeId is None or not getattr(config.option, "loadgroup", False):
        return
    group_module_fixture_users(items)
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)
