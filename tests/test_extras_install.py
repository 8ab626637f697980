"""Each extra, installed in a fresh virtual environment from this checkout, runs the README's
examples for it as a new user meets them (`pip install 'urlseen[crawlee]'`, then the Crawlee
example: it once failed with `No module named 'parsel'`).

Without an extra, the README's first set-up command runs verbatim (`python3 -m venv .venv && .
.venv/bin/activate && pip install . && urlseen dedup ...`) in a copy of the checkout: the
environment it makes is the one the examples without an extra run in. For each extra (redis,
scrapy, scrapy-redis, crawlee), the checkout, built into one wheel, is installed as
`<wheel>[extra]` from pip's index in a new `python -m venv`; all five at once. Nothing of this
test's own environment is visible there: the blocks run from a temporary folder with the
environment's interpreter, and the test checks that `urlseen` was imported from the new
environment.

Which README blocks belong to which extra, by the section they stand in: `## Scrapy` ->
scrapy, `### scrapy-redis ...` -> scrapy-redis, `## Crawlee for Python` -> crawlee; every other
```python block -> redis if it names the README's Redis URL (the test's server stands in for
it, as in test_readme.py), else none, after the set-up command's `urlseen dedup`. The Scrapy
blocks are settings: pasted into a settings module, they crawl a generated site served on
loopback (scrapy-redis's with the test server as its REDIS_URL); the Crawlee block's commented
`await crawler.run([...])` is run on that site. Every page must be fetched exactly once.
Takes ~1.5-3 min here (the installs, in parallel, most of it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from crawl_site import ServedSite
from test_readme import README_REDIS_URL, Block, _delete_keys, _redirected
from urlseen.canonical import canonicalize

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
EXTRAS = ("none", "redis", "scrapy", "scrapy-redis", "crawlee")
SECTIONS = {
    "Scrapy": "scrapy",
    "scrapy-redis and scrapy-redis-bloomfilter": "scrapy-redis",
    "Crawlee for Python": "crawlee",
}
PAGES = 40
LOG = {"LOG_LEVEL": "WARNING"}
INSTALL_SECONDS = 420

# Runs blocks in one namespace, as pasted one after the other; a block with a top-level await
# (the Crawlee example's run) runs in an event loop, as in `python -m asyncio`.
DRIVER = r"""
import ast, asyncio, json, sys
spec = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for block in spec["blocks"]:
    tree = ast.parse(block["source"])
    ast.increment_lineno(tree, block["line"] - 1)
    code = compile(tree, spec["readme"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)
import urlseen
print("URLSEEN-FROM", urlseen.__file__)
"""

# A Scrapy crawl with the README's settings (settings.py beside it): follows every link.
SCRAPY_RUN = r"""
import json, runpy, sys
from scrapy import Spider
from scrapy.crawler import CrawlerProcess

settings = {k: v for k, v in runpy.run_path("settings.py").items() if k.isupper()}
settings.update(json.loads(sys.argv[1]))

class Follow(Spider):
    name = sys.argv[2]
    start_urls = [sys.argv[3]]

    def parse(self, response):
        yield from response.follow_all(css="a", callback=self.parse)

process = CrawlerProcess(settings)
process.crawl(Follow)
process.start()
import urlseen
print("URLSEEN-FROM", urlseen.__file__)
"""


def sections(markdown: str) -> Iterator[tuple[str, int, str]]:
    """(heading, line of the first code line, body) of every ```python block."""
    heading, fence, body, start = "", None, [], 0
    for number, line in enumerate(markdown.splitlines(), start=1):
        if fence is None and line.startswith("```"):
            fence, body, start = line[3:].strip(), [], number + 1
        elif fence is not None and line.strip() == "```":
            if fence.split()[:1] == ["python"]:
                yield heading, start, "".join(f"{b}\n" for b in body)
            fence = None
        elif fence is not None:
            body.append(line)
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()


def blocks_for(extra: str) -> list[Block]:
    found = []
    for index, (heading, line, source) in enumerate(sections(README.read_text()), start=1):
        names_redis = README_REDIS_URL in source
        owner = SECTIONS.get(heading, "redis" if names_redis else "none")
        if owner == extra:
            found.append(Block(index, line, source, redis=names_redis))
    return found


def setup_command() -> str:
    """The README's first set-up command, as written."""
    match = re.search(r"^## Set-up.*?```sh\n(.*?)```", README.read_text(), re.S | re.M)
    assert match, "README.md has no set-up command"
    command = match.group(1).strip().splitlines()[0]
    assert "python3 -m venv .venv" in command, "the set-up no longer makes its environment"
    return command


def test_every_extra_has_its_readme_blocks() -> None:
    assert set(SECTIONS.values()) | {"none", "redis"} == set(EXTRAS)
    for extra in EXTRAS:
        assert blocks_for(extra), f"README.md has no ```python block for urlseen[{extra}]"


def _shell(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A shell line as a user's shell runs it, outside this test's environment; pip neither
    compiles bytecode (~1/3 of an install's CPU, the same for every extra) nor asks for news."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_NO_COMPILE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=INSTALL_SECONDS)  # fmt: skip


@pytest.fixture(scope="module")
def environments(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """extra -> a fresh virtual environment holding urlseen[extra], built from this checkout:
    the set-up command, the wheel's build, the environments and their installs all at once."""
    root = tmp_path_factory.mktemp("extras")
    checkout = root / "checkout"  # what a user cloned: the sources, no build or environment
    ignored = (".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".*cache")
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(*ignored))
    python = shlex.quote(sys.executable)
    with ThreadPoolExecutor(len(EXTRAS) + 1) as pool:
        wheel = pool.submit(_shell, f"{python} -m pip wheel -q --no-deps -w wheel {checkout}", root)

        def install(extra: str) -> tuple[str, subprocess.CompletedProcess[str]]:
            if extra == "none":
                return extra, _shell(setup_command(), checkout)
            made = _shell(f"{python} -m venv {extra}", root)
            if made.returncode != 0 or wheel.result().returncode != 0:
                return extra, made if made.returncode else wheel.result()
            (built,) = (root / "wheel").glob("urlseen-*.whl")
            return extra, _shell(f"{extra}/bin/pip install -q '{built}[{extra}]'", root)

        results = dict(pool.map(install, EXTRAS))
    failed = {e: r.stderr[-2000:] for e, r in results.items() if r.returncode != 0}
    assert not failed, f"pip install failed in a fresh virtual environment: {failed}"
    return {extra: checkout / ".venv" if extra == "none" else root / extra for extra in EXTRAS}


def _run(venv: Path, argv: list[str], cwd: Path, stdin: str = "", timeout: float = 180) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        argv, input=stdin, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{argv[:3]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


def _run_blocks(venv: Path, blocks: list[Block], sources: list[str], cwd: Path) -> None:
    spec = {
        "readme": str(README),
        "blocks": [{"line": b.line, "source": s} for b, s in zip(blocks, sources, strict=True)],
    }
    out = _run(venv, [str(venv / "bin" / "python"), "-c", DRIVER], cwd, json.dumps(spec))
    assert f"URLSEEN-FROM {venv}" in out, out  # the environment's urlseen, not the checkout's


def _fetched_once(served: ServedSite) -> None:
    """Every page of the site fetched, none twice (canonical URLs: fragments, query order)."""
    counts: Counter[str] = Counter()
    for path, times in served.requests.items():
        counts[canonicalize(served.base + path)] += times
    assert set(counts) == served.urls, sorted(set(counts) ^ served.urls)[:5]
    assert max(counts.values()) == 1, [u for u, n in counts.items() if n > 1][:5]


def test_no_extra_runs_the_setup_command_and_the_local_examples(
    environments: dict[str, Path], tmp_path: Path
) -> None:
    venv = environments["none"]
    out = (venv.parent / "unique-urls.txt").read_text().splitlines()  # the set-up command's
    assert 1000 < len(out) == len(set(out))
    blocks = blocks_for("none")
    _run_blocks(venv, blocks, [b.source for b in blocks], tmp_path)
    # Without the redis extra, a shared filter says which extra it needs.
    probe = "import urlseen; urlseen.RedisBloomFilter('redis://127.0.0.1:1/0', 'x', 10, 0.01)"
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)  # fmt: skip
    assert proc.returncode != 0 and "pip install 'urlseen[redis]'" in proc.stderr, proc.stderr


def test_redis_extra_runs_the_shared_examples(
    environments: dict[str, Path], tmp_path: Path, redis_url: str
) -> None:
    blocks = blocks_for("redis")
    prefix = f"extras-{uuid.uuid4().hex[:8]}-"
    try:
        _run_blocks(
            environments["redis"], blocks, [_redirected(b, redis_url, prefix) for b in blocks],
            tmp_path,
        )  # fmt: skip
    finally:
        deleted = _delete_keys(redis_url, prefix)
    assert deleted, f"the README's Redis examples made no key under {prefix}*"


def _scrapy_crawl(
    venv: Path, extra: str, cwd: Path, served: ServedSite, spider: str, ours: dict[str, str]
) -> None:
    """A crawl of the site with the README's settings for `extra` pasted into settings.py."""
    (cwd / "settings.py").write_text("".join(b.source for b in blocks_for(extra)))
    (cwd / "run.py").write_text(SCRAPY_RUN)
    argv = [str(venv / "bin" / "python"), "run.py", json.dumps(ours), spider, served.url]
    out = _run(venv, argv, cwd)
    assert f"URLSEEN-FROM {venv}" in out, out
    _fetched_once(served)


def test_scrapy_extra_crawls_with_the_readme_settings(
    environments: dict[str, Path], tmp_path: Path, serve_site: Callable[..., ServedSite]
) -> None:
    served = serve_site(pages=PAGES)
    _scrapy_crawl(environments["scrapy"], "scrapy", tmp_path, served, "site", LOG)
    assert (tmp_path / "crawls" / "site-1" / "urlseen").is_dir()  # the README's JOBDIR


def test_scrapy_redis_extra_crawls_with_the_readme_settings(
    environments: dict[str, Path],
    tmp_path: Path,
    serve_site: Callable[..., ServedSite],
    redis_url: str,
) -> None:
    served = serve_site(pages=PAGES)
    spider = f"extras-{uuid.uuid4().hex[:8]}"
    ours = {**LOG, "REDIS_URL": redis_url}  # the README keeps scrapy-redis's own REDIS_URL
    try:
        _scrapy_crawl(environments["scrapy-redis"], "scrapy-redis", tmp_path, served, spider, ours)
        import redis

        keys = list(redis.Redis.from_url(redis_url).scan_iter(match=f"*{spider}*"))
    finally:
        _delete_keys(redis_url, spider)
    assert any(b"urlseen:" in k for k in keys), keys  # urlseen's filter, in scrapy-redis's Redis


def test_crawlee_extra_crawls_with_the_readme_example(
    environments: dict[str, Path],
    tmp_path: Path,
    serve_site: Callable[..., ServedSite],
    redis_url: str,
) -> None:
    served = serve_site(pages=PAGES)
    (block,) = blocks_for("crawlee")
    run = re.compile(r"^# (await crawler\.run\()\[[^\]]*\]\)", re.M)
    assert run.search(block.source), "the Crawlee example no longer shows its crawler.run"
    source = run.sub(lambda m: f"{m.group(1)}[{served.url!r}])  #", block.source)
    venv = environments["crawlee"]
    _run_blocks(venv, [block], [source], tmp_path)
    _fetched_once(served)
    assert (tmp_path / "storage" / "urlseen" / "docs-crawl").is_dir()
    # redis_url= (the README's sharing) needs redis-py: the extra brings it.
    name = f"extras-{uuid.uuid4().hex[:8]}"
    share = (
        "from urlseen.integrations.crawlee import UrlseenRequestManager\n"
        f"m = UrlseenRequestManager(None, redis_url={redis_url!r}, redis_name={name!r})\n"
        "m.close()\n"
    )
    try:
        _run(venv, [str(venv / "bin" / "python"), "-c", share], tmp_path)
    finally:
        _delete_keys(redis_url, name)
