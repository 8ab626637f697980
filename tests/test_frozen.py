"""The plain classes that replace frozen dataclasses on the start-up path (urlseen/_frozen.py)
behave as the dataclass with the same fields would: equality, hash, repr, immutability, pickling."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from urlseen._frozen import Frozen
from urlseen.bloom.sizing import BloomSize
from urlseen.kinds import KINDS, OPTIONS, Kind, Option
from urlseen.kinds._openers import Request, plain
from urlseen.protocol import ClaimCounts, FilterStats


def as_dataclass(cls: type[Frozen]) -> type:
    """The frozen dataclass with cls's fields and defaults, under cls's name."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [p.name for p in parameters] == list(cls.__slots__)
    fields = [
        (p.name, Any) if p.default is inspect.Parameter.empty
        else (p.name, Any, dataclasses.field(default=p.default))
        for p in parameters
    ]  # fmt: skip
    made = dataclasses.make_dataclass(cls.__name__, fields, frozen=True)
    made.__qualname__ = cls.__qualname__
    return made


def request(**changed: Any) -> Request:
    values: dict[str, Any] = {"kind": "bloom", "capacity": 5, "error_rate": None, "state": None}
    values |= {"redis": None, "name": "", "given": {}, "defaults": {"capacity": 9}}
    return Request(**{**values, **changed})


def hashable_request(**changed: Any) -> Request:  # a Request holding dicts has no hash
    return request(given=(), defaults=(), **changed)


CASES: list[tuple[type[Frozen], list[tuple[tuple[Any, ...], dict[str, Any]]]]] = [
    (Option, [(("layout", "help"), {}), (("n", "h", int), {"low": 0, "high": 8, "default": 3})]),
    (BloomSize, [((512, 3, "blocked", 1e-6), {}), ((1024, 2, "standard", 0.5), {})]),
    (Kind, [(("bloom", "s", "file", 1e-6, 8192, ("layout",), print), {"marker": "m"}),
            (("exact", "s", "", None, 1, (), len, len, None), {"url_keys": True})]),
    (Request, [(("bloom", 5, None, None, None, "", ()), {"defaults": ()}),
               (("dsbf", None, 1e-3, None, "redis://x", "f", ()), {"defaults": (), "spell": str})]),
    # details is a dict in use (unhashable, as the dataclass's was); a tuple here for the hash
    (FilterStats, [(("bloom", 10, 1, 512, 1e-6, 0.0, ()), {}),
                   (("exact", 10, 2, 64, 1e-3, 1e-9), {"details": (("k", 3),)})]),
    (ClaimCounts, [((), {}), ((1,), {"lapsed": 2})]),
]  # fmt: skip


@pytest.mark.parametrize(("cls", "calls"), CASES, ids=[c.__name__ for c, _ in CASES])
def test_behaves_as_its_frozen_dataclass(cls: type[Frozen], calls: list[Any]) -> None:
    reference = as_dataclass(cls)
    mine = [cls(*args, **kwargs) for args, kwargs in calls]
    theirs = [reference(*args, **kwargs) for args, kwargs in calls]
    for a, ref_a in zip(mine, theirs, strict=True):
        assert repr(a) == repr(ref_a)
        assert hash(a) == hash(ref_a)
        assert a == cls(*(getattr(a, name) for name in cls.__slots__))
        assert a != ref_a  # another class, as two dataclasses are unequal
        assert (a == 1) is (ref_a == 1) is False
        assert copy.copy(a) == a and pickle.loads(pickle.dumps(a)) == a
        for name in cls.__slots__:
            assert getattr(a, name) == getattr(ref_a, name)
            for change in (lambda o, n=name: setattr(o, n, 1), lambda o, n=name: delattr(o, n)):
                with pytest.raises(dataclasses.FrozenInstanceError) as got:
                    change(a)
                with pytest.raises(dataclasses.FrozenInstanceError) as expected:
                    change(ref_a)
                assert str(got.value) == str(expected.value)
        with pytest.raises(AttributeError):
            a.unknown = 1  # type: ignore[attr-defined]
    assert (mine[0] == mine[1]) is (theirs[0] == theirs[1]) is False


def test_the_tables_rows_compare_and_print_as_before() -> None:
    bloom = KINDS["bloom"]
    assert bloom == Kind(*(getattr(bloom, name) for name in Kind.__slots__))
    assert repr(OPTIONS["layout"]).startswith("Option(name='layout', help=")
    assert request() == request() != request(capacity=6)
    assert request().defaults == {"capacity": 9}
    assert request(defaults=None).defaults == {}  # left out: an empty mapping
    assert request().spell is plain
    with pytest.raises(TypeError, match="unhashable"):
        hash(request())  # as the dataclass: a dict field makes it unhashable
    assert hash(hashable_request()) == hash(hashable_request())
