"""The house rules ARCHITECTURE.md draws, read from the source: which wing may import which,
only shared/ knows Redis, the job sees filters through the protocol, and no room grows past its
budget. Imports are read with ast, inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "urlseen"
FAMILIES = ("bloom", "exact", "splittable", "similarity")
# Modules every wing may use: the floor of the house.
FLOOR = (
    "urlseen._core",
    "urlseen.defaults",
    "urlseen._frozen",
    "urlseen._lifecycle",
    "urlseen.canonical",
    "urlseen.errors",
    "urlseen.hashes",
    "urlseen.protocol",
    "urlseen.state",
)


def _python(folder: str = "") -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Every urlseen module a file imports, `from urlseen import x` read as urlseen.x."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "urlseen":  # the facade's names, or its modules
                found.update(f"urlseen.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _id(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


@pytest.mark.parametrize("path", _python(), ids=_id)
def test_only_shared_imports_redis(path: Path) -> None:
    if path.is_relative_to(PACKAGE / "shared"):
        return
    bad = {name for name in _imports(path) if _under(name, "redis")}
    assert not bad, f"{_id(path)} imports {sorted(bad)}: Redis belongs in urlseen/shared/"


# The one door up: SplittableBloomFilter(..., redis=URL) asks the kinds table (inside the
# function, when a URL is given) for the Redis leaf store, so the constructor users call keeps
# working while splittable/ itself imports no Redis code.
DOORS_UP = {"splittable/filter.py": ("urlseen.kinds",)}


@pytest.mark.parametrize("path", [p for family in FAMILIES for p in _python(family)], ids=_id)
def test_family_wings_know_neither_the_host_nor_each_other(path: Path) -> None:
    """An algorithm wing stands on the floor and on bloom/ (the Bloom filter every other family
    is built from); it imports no other family, no Redis glue and no front end."""
    own = "urlseen." + _id(path).split("/")[0]
    allowed = (*FLOOR, own, "urlseen.bloom", "urlseen.defaults", *DOORS_UP.get(_id(path), ()))
    bad = {
        name
        for name in _imports(path)
        if _under(name, "urlseen") and name != "urlseen" and not _under(name, *allowed)
    }
    assert not bad, f"{_id(path)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", _python("job"), ids=_id)
def test_the_job_sees_filters_only_through_the_protocol(path: Path) -> None:
    allowed = ("urlseen._core", "urlseen._frozen", "urlseen._lifecycle", "urlseen.canonical",
               "urlseen.errors", "urlseen.protocol", "urlseen.job")  # fmt: skip
    bad = {
        name for name in _imports(path) if _under(name, "urlseen") and not _under(name, *allowed)
    }
    assert not bad, f"{_id(path)} imports {sorted(bad)}: the job knows filters by protocol.py"


def test_cli_stays_thin() -> None:
    # 700 for the click commands, and ~300 more for `urlseen dedup`'s command line read without
    # click (cli/_dedup_args.py, the group and options split from the run): its fast start;
    # +15 for the `if TYPE_CHECKING:` blocks that keep typing itself off that start
    lines = sum(len(p.read_text().splitlines()) for p in PACKAGE.glob("cli/*.py"))
    assert lines < 1015, f"cli/ has {lines} lines: its logic belongs in kinds/ or the job"


@pytest.mark.parametrize("path", [*_python("cli"), *_python("integrations")], ids=_id)
def test_front_ends_open_filters_through_kinds(path: Path) -> None:
    """cli/ and integrations/ reach filters through urlseen.kinds (and the public classes),
    never a store, a state file, the Redis glue's internals or the C core."""
    storage = ("urlseen._core", "urlseen.state", "urlseen.exact.sqlite_library",
               "urlseen.exact.memory_library", "urlseen.exact.runs", "urlseen.exact.staging",
               "urlseen.splittable.tree", "urlseen.splittable.coding",
               "urlseen.shared.client", "urlseen.shared.claims", "urlseen.shared.leaves",
               "urlseen.shared.scripts", "urlseen.shared.bits")  # fmt: skip
    bad = {name for name in _imports(path) if _under(name, *storage)}
    assert not bad, f"{_id(path)} imports {sorted(bad)}: open filters through urlseen.kinds"


SOURCES = sorted(
    p for pattern in ("*.py", "*.c", "*.h", "*.lua", "*.pyi") for p in PACKAGE.rglob(pattern)
)


@pytest.mark.parametrize("path", SOURCES, ids=_id)
def test_no_source_file_over_600_lines(path: Path) -> None:
    limit = 250 if path.suffix == ".lua" else 600
    lines = len(path.read_text().splitlines())
    assert lines <= limit, f"{_id(path)} has {lines} lines (at most {limit}): split it by idea"


@pytest.mark.parametrize("path", _python(), ids=_id)
def test_no_class_over_400_lines(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ClassDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            assert lines <= 400, f"{_id(path)}: class {node.name} has {lines} lines"


# Each wing's budget in lines (.py, .lua; C in csrc/ and bindings/): a wing that outgrows it
# is doing a second job.
BUDGETS = {
    "integrations": 2700,  # expiry, forget-on-failure (scrapy_forget.py), the prefetch middleware
    "kinds": 1210,  # with the opening of a kind in generations that expire (_generations.py),
    # and info's first-seen ages of an exact library
    "job": 1750,  # with expiry by generations of whole filters (generations.py)
    "state": 1500,
    "bloom": 2100,  # with the growing filter (growing.py) and the dropped-URL estimate (sizing)
    "exact": 2900,  # with the counters that grow from the library (growth.py)
    "splittable": 1850,  # with the leaves' compaction (split.py) and retirement by tree version
    "shared": 6700,  # with the write marks (shared/marks.py), the lease accounting (claims.py),
    # the announced tree versions that free a split's leaves (leaf_tree.py, dsbf_tree.lua), the
    # local cache of seen answers (seen_cache.py), the library's linear hashing, the Bloom
    # filter's shards (bloom_shard.py), an expiring filter's generations (generations.py) and
    # the library's reads and writes by runs of one bucket (library_buckets.lua)
    "similarity": 1100,
    "frontier": 800,
}


@pytest.mark.parametrize("wing", sorted(BUDGETS))
def test_each_wing_keeps_its_line_budget(wing: str) -> None:
    folder = PACKAGE / wing
    if not folder.exists():
        pytest.skip(f"no {wing}/ yet")
    files = [p for p in folder.rglob("*") if p.suffix in (".py", ".lua")]
    lines = sum(len(p.read_text().splitlines()) for p in files)
    assert lines <= BUDGETS[wing], f"{wing}/ has {lines} lines, its budget {BUDGETS[wing]}"
