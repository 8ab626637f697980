"""Every ConfigError, TypeError and InvalidKeyError the public API promises, with messages that
name the argument (or the key's type and position), and batches that are all-or-nothing."""

from __future__ import annotations

import math

import pytest

from urlseen import BloomFilter, ConfigError, InvalidKeyError, UrlseenError

# ---- constructor parameters -----------------------------------------------------------------

BAD_CAPACITY = [0, -1, 1.5, "10", True, False, None, 10.0, [10]]
BAD_ERROR_RATE = [0, 0.0, 1, 1.0, -0.1, 1.5, math.nan, math.inf, "0.1", None, True, 1e-30, [0.1]]
BAD_LAYOUT = ["foo", "", "Blocked", None, 0, 1]
BAD_SEED = [-1, 2**32, 2**64, "x", 1.0, None, True]


def _constructors(tmp_path):
    path = tmp_path / "never-created.urlseen"
    return path, [
        lambda **kw: BloomFilter(**kw),
        lambda **kw: BloomFilter.create(path, **kw),
    ]


def _check_config_error(tmp_path, argument: str, value, **kwargs):
    path, constructors = _constructors(tmp_path)
    for construct in constructors:
        with pytest.raises(ConfigError) as info:
            construct(**kwargs)
        message = str(info.value)
        assert argument in message, message
        if not isinstance(value, float) or math.isfinite(value):
            assert repr(value) in message or str(value) in message, message
        assert isinstance(info.value, ValueError) and isinstance(info.value, UrlseenError)
    assert not path.exists(), "a rejected create() must not leave a file"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("capacity", BAD_CAPACITY, ids=repr)
def test_bad_capacity(tmp_path, capacity):
    _check_config_error(tmp_path, "capacity", capacity, capacity=capacity, error_rate=0.01)


@pytest.mark.parametrize("error_rate", BAD_ERROR_RATE, ids=repr)
def test_bad_error_rate(tmp_path, error_rate):
    _check_config_error(tmp_path, "error_rate", error_rate, capacity=100, error_rate=error_rate)


@pytest.mark.parametrize("layout", BAD_LAYOUT, ids=repr)
def test_bad_layout(tmp_path, layout):
    _check_config_error(tmp_path, "layout", layout, capacity=100, error_rate=0.01, layout=layout)


@pytest.mark.parametrize("seed", BAD_SEED, ids=repr)
def test_bad_seed(tmp_path, seed):
    _check_config_error(tmp_path, "seed", seed, capacity=100, error_rate=0.01, seed=seed)


def test_nan_error_rate_message_names_the_value(tmp_path):
    with pytest.raises(ConfigError, match=r"error_rate.*nan"):
        BloomFilter(capacity=100, error_rate=math.nan)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 1, "error_rate": 0.5},
        {"capacity": 1, "error_rate": 1e-18},
        {"capacity": 10**6, "error_rate": 0.999},
        {"capacity": 100, "error_rate": 0.01, "seed": 2**32 - 1},
        {"capacity": 100, "error_rate": 0.01, "seed": 0},
    ],
    ids=repr,
)
def test_edge_values_that_are_valid(kwargs):
    for layout in ("blocked", "standard"):
        f = BloomFilter(**kwargs, layout=layout)
        assert f.add("k") is True and "k" in f


def test_layout_and_seed_are_keyword_only():
    with pytest.raises(TypeError):
        BloomFilter(100, 0.01, "standard")  # type: ignore[misc]


# ---- keys -----------------------------------------------------------------------------------

BAD_TYPES = [1, None, ["a"], 1.5, {"a": 1}, object(), ("a",)]


def _filter() -> BloomFilter:
    f = BloomFilter(capacity=100_000, error_rate=0.001)
    f.update(["https://a/", "https://b/"])
    return f


SINGLE_OPS = {
    "add": lambda f, key: f.add(key),
    "in": lambda f, key: key in f,
    "positions": lambda f, key: f.positions(key),
}
BATCH_OPS = {
    "add_many": lambda f, keys: f.add_many(keys),
    "contains_many": lambda f, keys: f.contains_many(keys),
    "update": lambda f, keys: f.update(keys),
}


@pytest.mark.parametrize("op", list(SINGLE_OPS))
@pytest.mark.parametrize("key", BAD_TYPES, ids=lambda k: type(k).__name__)
def test_single_key_of_the_wrong_type(op, key):
    f = _filter()
    with pytest.raises(TypeError, match=f"not '{type(key).__name__}'"):
        SINGLE_OPS[op](f, key)
    assert len(f) == 2


@pytest.mark.parametrize("op", list(BATCH_OPS))
@pytest.mark.parametrize("key", BAD_TYPES, ids=lambda k: type(k).__name__)
def test_batch_key_of_the_wrong_type_names_type_and_position(op, key):
    f = _filter()
    with pytest.raises(TypeError, match=f"key 2 of the batch .*not '{type(key).__name__}'"):
        BATCH_OPS[op](f, ["x", b"y", key, "z"])


@pytest.mark.parametrize("op", list(BATCH_OPS))
@pytest.mark.parametrize("keys", [5, None, 1.5, object()], ids=lambda k: type(k).__name__)
def test_batch_that_is_not_iterable(op, keys):
    with pytest.raises(TypeError, match=f"iterable.*not '{type(keys).__name__}'"):
        BATCH_OPS[op](_filter(), keys)


@pytest.mark.parametrize("op", sorted(BATCH_OPS))
@pytest.mark.parametrize(
    "single",
    ["https://a/", b"https://a/", bytearray(b"https://a/")],
    ids=lambda k: type(k).__name__,
)
def test_a_single_key_as_the_batch_is_refused(op, single):
    # Iterating it would add every character (or byte value) as a key; refuse, change nothing.
    f = _filter()
    before = len(f)
    with pytest.raises(TypeError, match=f"not a single '{type(single).__name__}'"):
        BATCH_OPS[op](f, single)
    assert len(f) == before and "h" not in f


UNENCODABLE = ["\ud800", "abc\udfffdef", "\udc80", "https://ex.com/\udcff", "ok\ud83d"]


@pytest.mark.parametrize("op", list(SINGLE_OPS))
@pytest.mark.parametrize("key", UNENCODABLE, ids=ascii)
def test_single_key_with_lone_surrogate(op, key):
    f = _filter()
    with pytest.raises(InvalidKeyError, match="UTF-8") as info:
        SINGLE_OPS[op](f, key)
    assert "surrogate" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, UrlseenError)
    assert isinstance(info.value.__cause__, UnicodeEncodeError)
    assert len(f) == 2


@pytest.mark.parametrize("op", list(BATCH_OPS))
@pytest.mark.parametrize("key", UNENCODABLE, ids=ascii)
def test_batch_key_with_lone_surrogate(op, key):
    with pytest.raises(InvalidKeyError, match=r"key 1 of the batch .*UTF-8"):
        BATCH_OPS[op](_filter(), ["fine", key])


def test_surrogate_pair_written_properly_is_fine():
    f = _filter()
    assert f.add("\U0001f600") is True and "\U0001f600".encode() in f


# ---- batches are all-or-nothing -------------------------------------------------------------


class Boom(Exception):
    pass


def _exploding(keys):
    yield from keys
    raise Boom("the iterable failed")


BAD_TAILS = {
    "int": (1, TypeError),
    "None": (None, TypeError),
    "surrogate": ("\ud800", InvalidKeyError),
    "list": (["x"], TypeError),
}


@pytest.mark.parametrize("container", ["list", "tuple", "generator"])
@pytest.mark.parametrize("where", ["end", "start", "middle"])
@pytest.mark.parametrize("bad", list(BAD_TAILS))
@pytest.mark.parametrize("op", ["add_many", "update"])
def test_bad_key_leaves_the_filter_unchanged(op, bad, where, container):
    f = _filter()
    before_len, before_ones = len(f), f.popcount()
    fresh = [f"https://new.example/{i}" for i in range(1000)]
    key, error = BAD_TAILS[bad]
    index = {"end": len(fresh), "start": 0, "middle": 500}[where]
    batch = [*fresh[:index], key, *fresh[index:]]
    wrapped = {"list": list, "tuple": tuple, "generator": lambda b: (k for k in b)}[container](
        batch
    )
    with pytest.raises(error, match=f"key {index} of the batch"):
        BATCH_OPS[op](f, wrapped)
    assert len(f) == before_len
    assert f.popcount() == before_ones, "no bit may change"
    assert not any(f.contains_many(fresh))
    assert f.add_many(fresh) == [True] * len(fresh)  # and the filter still works


def test_failing_iterable_leaves_the_filter_unchanged():
    f = _filter()
    ones = f.popcount()
    for op in ("add_many", "update", "contains_many"):
        with pytest.raises(Boom):
            BATCH_OPS[op](f, _exploding(["https://c/", "https://d/"]))
    assert len(f) == 2 and f.popcount() == ones and "https://c/" not in f


def test_a_bad_key_after_the_first_chunk_changes_nothing():
    # Batches over 2**21 keys are probed in chunks; a validation pass must still refuse the
    # whole batch before the first chunk is applied.
    f = BloomFilter(capacity=3_000_000, error_rate=0.01)
    keys = [f"https://example.com/{i}" for i in range((1 << 21) + 100)]
    keys.append("\ud800")
    with pytest.raises(InvalidKeyError, match=f"key {len(keys) - 1} of the batch"):
        f.add_many(keys)
    assert len(f) == 0 and keys[0] not in f
    new = f.update(keys[:-1])  # the valid part goes through, chunk after chunk
    assert new == len(f) >= 0.99 * (len(keys) - 1)
    assert all(f.contains_many(keys[:-1]))
