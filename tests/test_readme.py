"""The README's Python examples run as written.

Every ```python block of README.md is pasted, in order, into one fresh interpreter that behaves
like the interactive prompt: each top-level statement is compiled in "single" mode, so an
expression's value is printed and kept in `_` (which keeps an unclosed filter open, as it does
for a user). A line whose comment starts with a literal (`x.add(u)   # True: new`) claims the
value the prompt prints; the test checks it. The whole sequence runs twice in the same folder
(a tmp_path, the interpreter's working directory), as a user who runs the examples again: files
made by the first run must not break the second.

Blocks that name the README's Redis URL run against the test server (URLSEEN_REDIS_URL, else
database 15, as in conftest.py), with each `name="..."` given a prefix unique to this test run;
every key holding that prefix is deleted afterwards. Without a Redis server those blocks are
left out and the test skips with the reason once the others have passed (fails in CI).

Cheaper checks go with it: each block stands alone (its imports and data are in it), pastes into
the prompt of Python < 3.13, and no two kinds of shared filter share a name across the examples.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tokenize
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import DEFAULT_REDIS_URL, in_ci

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
README_REDIS_URL = "redis://127.0.0.1:6379/0"  # the one Redis URL the README's examples use
REDIS_SCHEMES = ("redis://", "rediss://", "redis-cluster://", "unix://")
RESULT = "README-RESULT "  # the driver's last stderr line: this marker, then JSON
COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef,
            ast.AsyncFor, ast.AsyncWith, ast.AsyncFunctionDef)  # fmt: skip


@dataclass
class Block:
    """One ```python block: its rank among them, the README line of its first code line."""

    index: int
    line: int
    source: str
    claims: list[tuple[int, int, str]] = field(default_factory=list)  # README lines, repr
    redis: bool = False

    def where(self) -> str:
        return f"README.md python block {self.index} (line {self.line})"


def fenced_blocks(markdown: str) -> list[tuple[str, int, str]]:
    """(info string, line of the first code line, body) of every fenced code block."""
    blocks: list[tuple[str, int, str]] = []
    info: str | None = None
    body: list[str] = []
    start = 0
    for number, line in enumerate(markdown.splitlines(), start=1):
        if info is None and line.startswith("```"):
            info, body, start = line[3:].strip(), [], number + 1
        elif info is not None and line.strip() == "```":
            blocks.append((info, start, "".join(f"{b}\n" for b in body)))
            info = None
        elif info is not None:
            body.append(line)
    assert info is None, "README.md has an unclosed code fence"
    return blocks


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _claim(comment: str) -> str | None:
    """The value a comment claims, as its repr, or None: the longest part of the comment before
    a colon (or all of it) that is a Python literal (`# True: new` -> "True")."""
    text = comment.lstrip("#").strip()
    cuts = [len(text), *sorted((i for i, c in enumerate(text) if c == ":"), reverse=True)]
    for cut in cuts:
        try:
            return repr(ast.literal_eval(text[:cut].strip()))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def python_blocks(markdown: str) -> list[Block]:
    blocks = []
    for info, line, source in fenced_blocks(markdown):
        if info.split()[:1] != ["python"]:
            continue
        block = Block(len(blocks) + 1, line, source)
        try:
            tree = ast.parse(source)
            tokens = _tokens(source)
        except SyntaxError as exc:
            pytest.fail(f"{block.where()} is not valid Python: {exc}\n{source}")
        comments = {t.start[0]: t.string for t in tokens if t.type == tokenize.COMMENT}
        for node in ast.walk(tree):  # the prompt prints nested expression statements too
            if isinstance(node, ast.Expr):
                end = node.end_lineno or node.lineno
                claim = _claim(comments.get(end, ""))
                if claim is not None:
                    block.claims.append((line - 1 + node.lineno, line - 1 + end, claim))
        strings = [t.string for t in tokens if t.type == tokenize.STRING]
        block.redis = any(s in (f'"{README_REDIS_URL}"', f"'{README_REDIS_URL}'") for s in strings)
        others = [s for s in strings if any(p in s for p in REDIS_SCHEMES)]
        others = [s for s in others if s.strip("\"'") != README_REDIS_URL]
        assert not others, (
            f"{block.where()} names Redis as {others}: use {README_REDIS_URL!r}, the one URL "
            "this test redirects to its own server"
        )
        blocks.append(block)
    return blocks


def test_python_blocks_paste_into_the_classic_prompt() -> None:
    """The prompt before Python 3.13 ends a compound statement at the first empty line and
    refuses a statement that follows one without an empty line in between."""
    for block in python_blocks(README.read_text()):
        lines = block.source.splitlines()
        body = ast.parse(block.source).body
        for stmt, after in zip(body, [*body[1:], None], strict=True):
            if not isinstance(stmt, COMPOUND):
                continue
            end = stmt.end_lineno or stmt.lineno
            inside = lines[stmt.lineno - 1 : end]
            assert all(text.strip() for text in inside), (
                f"{block.where()}: an empty line inside the statement at README line "
                f"{block.line - 1 + stmt.lineno} ends it early at the prompt"
            )
            if after is not None:
                assert any(not text.strip() for text in lines[end : after.lineno - 1]), (
                    f"{block.where()}: the statement at README line "
                    f"{block.line - 1 + after.lineno} needs an empty line before it to be "
                    "pasted at the prompt after the block above it"
                )


def _free_names(tree: ast.Module) -> set[str]:
    """Names the code reads but neither binds nor imports, builtins aside."""
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or (
            isinstance(node, ast.ExceptHandler) and node.name
        ):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound - set(dir(builtins))


def test_each_python_block_stands_alone() -> None:
    """A reader who pastes one example alone, from the middle of the README, has every name it
    uses: its imports and the few URLs it works on are in the block."""
    for block in python_blocks(README.read_text()):
        free = _free_names(ast.parse(block.source))
        assert not free, f"{block.where()} uses {sorted(free)} without defining them"


# The interpreter the blocks run in. It reads {"readme": path, "blocks": [...]} on stdin and
# ends with one line on stderr: RESULT and {"block": index or null, "error": text}.
DRIVER = r"""
import ast, builtins, json, sys, traceback, warnings

spec = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__", "__builtins__": builtins}
shown = {}  # README line -> repr of the last value the prompt printed there

def displayhook(value):
    shown[sys._getframe(1).f_lineno] = repr(value)
    sys.__displayhook__(value)  # prints it and keeps it in builtins._, as the prompt does

sys.displayhook = displayhook
# A warning from urlseen or from the examples (an unclean shutdown, rebuilt counters) is a fault
# of the README's examples: the README would have to say so.
warnings.filterwarnings("error", module=r"(__main__|urlseen)(\.|$)")

def finish(block, error):
    sys.stdout.flush()
    print("\n" + spec["marker"] + json.dumps({"block": block, "error": error}), file=sys.stderr)
    sys.exit(1 if error else 0)

for block in spec["blocks"]:
    tree = ast.parse(block["source"])
    ast.increment_lineno(tree, block["line"] - 1)  # tracebacks name README.md's own lines
    for stmt in tree.body:
        shown.clear()
        try:
            exec(compile(ast.Interactive(body=[stmt]), spec["readme"], "single"), namespace)
        except BaseException:
            kind, exc, tb = sys.exc_info()
            finish(block["index"], "".join(traceback.format_exception(kind, exc, tb.tb_next)))
        for first, last, claim in block["claims"]:
            if stmt.lineno <= first <= (stmt.end_lineno or stmt.lineno):
                got = [shown[n] for n in range(first, last + 1) if n in shown]
                if got != [claim]:
                    finish(block["index"], f"README.md line {last} claims {claim}; the prompt "
                                           f"printed {got[0] if got else 'nothing'} there")
finish(None, "")
"""


def _test_redis() -> tuple[str | None, str]:
    """The test server's URL, or None and why there is none."""
    url = os.environ.get("URLSEEN_REDIS_URL", DEFAULT_REDIS_URL)
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:
        return None, f"no Redis server at {url} ({exc}); start one or set URLSEEN_REDIS_URL"
    return url, ""


def _redirected(block: Block, redis_url: str, prefix: str) -> str:
    """The block's source on the test server, each filter name given the prefix."""
    source, names = re.subn(r"""(\bname\s*=\s*)(["'])([^"'\\{}]+)\2""", rf"\1\2{prefix}\3\2",
                            block.source)  # fmt: skip
    assert names, (
        f"{block.where()} uses Redis without naming its filter (name=...): the test could not "
        "keep its keys apart from anything else on the server"
    )
    for quote in "\"'":
        source = source.replace(f"{quote}{README_REDIS_URL}{quote}", repr(redis_url))
    return source


def _run(blocks: list[Block], sources: list[str], cwd: Path, run: str) -> None:
    spec = {
        "readme": str(README),
        "marker": RESULT,
        "blocks": [
            {"index": b.index, "line": b.line, "source": s,
             "claims": b.claims}
            for b, s in zip(blocks, sources, strict=True)
        ],
    }  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], input=json.dumps(spec), cwd=cwd,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    stderr, _, last = proc.stderr.rstrip().rpartition("\n")
    if not last.startswith(RESULT):
        pytest.fail(
            f"{run} run: the interpreter ended without a result (exit {proc.returncode})\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    result = json.loads(last[len(RESULT) :])
    if result["block"] is not None:
        block = next(b for b in blocks if b.index == result["block"])
        pytest.fail(
            f"{run} run: {block.where()} fails as pasted:\n\n{block.source}\n{result['error']}"
            f"\nstdout:\n{proc.stdout}\nstderr:\n{stderr}"
        )
    assert proc.returncode == 0, proc.stderr


def _delete_keys(redis_url: str, prefix: str) -> int:
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    assert not list(client.scan_iter(match=f"*{prefix}*", count=1000))
    return len(keys)


def test_python_blocks_run_as_pasted_twice(tmp_path: Path) -> None:
    blocks = python_blocks(README.read_text())
    assert blocks, "README.md has no ```python block"
    redis_url, why = _test_redis() if any(b.redis for b in blocks) else (None, "")
    if why and in_ci():
        pytest.fail(f"{why}, and CI is set: CI starts one")
    ran = [b for b in blocks if redis_url or not b.redis]
    prefix = f"readme-{uuid.uuid4().hex[:8]}-"
    sources = [_redirected(b, redis_url, prefix) if b.redis and redis_url else b.source
               for b in ran]  # fmt: skip
    cwd = tmp_path / "user"
    cwd.mkdir()
    try:
        _run(ran, sources, cwd, "first")
        _run(ran, sources, cwd, "second")
    finally:
        deleted = _delete_keys(redis_url, prefix) if redis_url else 0
        shutil.rmtree(cwd, ignore_errors=True)
    if redis_url:
        used = [b.where() for b in ran if b.redis]
        assert not used or deleted, f"{used} made no key on the test server under {prefix}*"
    skipped = [b.where() for b in blocks if b not in ran]
    if skipped:
        pytest.skip(f"{len(ran)} blocks ran and passed; not run, needing Redis: {skipped}: {why}")


_KINDS = {"RedisBloomFilter": "bloom", "SplittableBloomFilter": "dsbf", "BloomFilter": "bloom",
          "FingerprintLibraryFilter": "exact", "RedisLibrary": "exact", "ExactFilter": "exact",
          "RotatingBloomFilter": "rotating", "MultiDimensionalBloomFilter": "mdbf",
          "CountingBloomFilter": "counting"}  # fmt: skip


def _filters_named(markdown: str) -> list[tuple[str, str, str]]:
    """(place, kind, README line) of every filter an example makes or uses by name: a shared
    filter's Redis name ("redis:<name>") or a state's path ("state:<path>")."""
    found = []
    for info, line, body in fenced_blocks(markdown):
        if info.split()[:1] == ["python"]:
            for node in ast.walk(ast.parse(body)):
                if not isinstance(node, ast.Call):
                    continue
                func, where = node.func, f"line {line - 1 + node.lineno}"
                if isinstance(func, ast.Attribute) and func.attr in ("create", "open"):
                    owner = func.value
                    kind = owner.attr if isinstance(owner, ast.Attribute) else ""
                    first = node.args[0] if node.args else None
                    if kind in _KINDS and isinstance(first, ast.Constant):
                        found.append((f"state:{first.value}".rstrip("/"), _KINDS[kind], where))
                    continue
                kind = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                for kw in node.keywords:
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                        found.append((f"redis:{kw.value.value}", _KINDS.get(kind, kind), where))
            continue
        for offset, text in enumerate(body.splitlines()):
            try:
                argv = shlex.split(text, comments=True)
            except ValueError:
                continue
            if argv[:2] != ["urlseen", "dedup"]:
                continue
            options = dict(zip(argv, [*argv[1:], ""], strict=True))
            options.update(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
            kind = options.get("--filter", "bloom")
            for option, place in (("--name", "redis"), ("--state", "state")):
                if option in options:
                    name = f"{place}:{options[option]}".rstrip("/")
                    found.append((name, kind, f"line {line + offset}"))
    return found


def test_distinct_filters_have_distinct_names() -> None:
    """A reader who runs the examples one after another, against one server and in one folder,
    must not meet two kinds of filter under one name: the second would be refused, or would
    land beside the first (an exact filter's folder also holding a rotating filter)."""
    found = _filters_named(README.read_text())
    assert {p.split(":")[0] for p, _, _ in found} == {"redis", "state"}, found
    kinds: dict[str, set[str]] = {}
    for place, kind, _ in found:
        kinds.setdefault(place, set()).add(kind)
    shared = {place: k for place, k in kinds.items() if len(k) > 1}
    assert not shared, f"one name for several filters: {shared}; uses: {found}"
