"""How `make test` spreads the suite over pytest-xdist workers (``-n N --dist loadfile --no-loadscope-reorder``).

- A worker runs whole files, so a file's module-scoped servers start once and its tests run in their written order.
- Files that must not run at the same time as one another share a group, which one worker runs file after file
  (``FileGroups``, the scheduler ``--dist loadfile`` gets from tests/conftest.py). A file that starts a Ray cluster
  (found by its source, see ``RAY``) is in ``ray``: clusters started at once on a busy machine miss Ray's fixed 30 s
  start-up wait. Any file can name its group: ``pytestmark = pytest.mark.xdist_group("name")`` at module level (a
  group is per file: xdist's own ``loadgroup`` does not work with pytest 9.2, which no longer reads ``_nodeid``).
- The slowest files (``SLOW``, measured) are handed out first, so that no long file starts last; the rest follow
  in file order (``order``, run in every worker, which all collect the same order).

Everything a test starts is its worker's own: ports come from the kernel (``free_port``), temp dirs from pytest's
per-worker ``tmp_path``, process checks count the test's own process tree (``helpers.child_pids``) or processes
marked with a per-test environment variable, never the host's.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# What in a test file's source starts a Ray cluster in the test process or in a command it runs.
RAY = ("ray.init(", "cluster_utils", 'engine="ray"', '"--ray"', "RayVectorEnv(")
MARK = re.compile(r"""^pytestmark\b.*xdist_group\(\s*["']([\w./-]+)["']""", re.M)

# The slowest files or groups, slowest first (``--durations=0`` of a run at -n 4 on the 2-core VM); a file missing
# here only starts later. Ray started by a command a test runs (tests/test_examples.py's pages, the chaos CLI) is
# not grouped: that would put most of the suite's long files on one worker.
SLOW = (
    "tests/trainers/test_trl.py",
    "ray",
    "tests/test_examples.py",
    "tests/conformance/test_servers.py",
    "tests/conformance/test_client.py",
    "tests/envs/browser/test_browser.py",
    "tests/sandbox/test_escapes.py",
    "tests/envs/gaia/test_gaia_chaos.py",
    "tests/envs/code/test_code_chaos.py",
    "tests/mcp/test_soak.py",
)


@cache
def group_of(path: str) -> str:
    """The group of a test file (``path`` as in node ids): its module-level ``xdist_group`` mark, ``ray``, or itself."""
    try:
        source = (ROOT / path).read_text(errors="replace")
    except OSError:
        return path
    mark = MARK.search(source)
    if mark:
        return mark.group(1)
    if Path(path).name.startswith("test_") and any(s in source for s in RAY):
        return "ray"
    return path


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def order(items: list[Any]) -> None:
    """Put the slow groups first, each group's files together (stable: file order otherwise)."""
    rank = {group: i for i, group in enumerate(SLOW)}
    first = {}  # a group's place: its first file's
    for i, item in enumerate(items):
        first.setdefault(group_of(_file(item.nodeid)), i)

    def key(item: Any) -> tuple[int, int]:
        group = group_of(_file(item.nodeid))
        return rank.get(group, len(rank)), first[group]

    items.sort(key=key)


def scheduler(config: Any, log: Any) -> Any:
    """xdist's ``loadfile`` scheduler with files grouped by ``group_of``."""
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(_file(nodeid))

    return FileGroups(config, log)
