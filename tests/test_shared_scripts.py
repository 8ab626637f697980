"""The batch scripts' protocol is spelled once on each side: each script's `-- KEYS:` and
`-- ARGV:` header lines name what urlseen.shared.scripts builds, in order, and the Lua names
of the operations and answers have the values of Op and Answer."""

from __future__ import annotations

import re

import pytest

from urlseen.shared.scripts import (
    LEAF_BATCH,
    LEAF_OWN,
    LEAVES_SHARED,
    SCRIPTS,
    Answer,
    Op,
    Script,
    leaves_argv,
    lua_text,
)


def _header(text: str, label: str) -> tuple[str, ...]:
    """The names a header line lists, with its continuation lines ("--" and spaces)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"-- {label}:"):
            names = line.split(":", 1)[1].split()
            for more in lines[i + 1 :]:
                if not re.match(r"--\s{3,}\S", more):
                    break
                names += more[2:].split()
            return tuple(names)
    raise AssertionError(f"no -- {label}: line")


@pytest.mark.parametrize("script", list(SCRIPTS.values()), ids=lambda s: s.filename)
def test_each_scripts_header_names_what_the_builder_sends(script: Script) -> None:
    text = lua_text(script.filename)
    assert _header(text, "KEYS") == script.keys
    assert _header(text, "ARGV") == script.argv


def test_the_builder_refuses_a_field_the_script_does_not_take() -> None:
    script = next(iter(SCRIPTS.values()))
    keys = dict.fromkeys(script.keys, "k")
    args = dict.fromkeys(script.argv, 1)
    built_keys, built_args = script.call(keys, args, [b"tail"])
    assert built_keys == ["k"] * len(script.keys) and built_args[-1] == b"tail"
    with pytest.raises(KeyError, match="takes no"):
        script.call(keys, {**args, "nonsense": 1})
    with pytest.raises(KeyError):
        script.call(keys, {})


def test_the_lua_names_of_operations_and_answers_are_the_pythons() -> None:
    lua = lua_text("claims.lua") + lua_text("bits.lua")
    bound: dict[str, str] = {}
    for names, values in re.findall(r"^local ([A-Z_, ]+) = ('[^\n]+)$", lua, re.MULTILINE):
        for name, value in zip(names.split(", "), re.findall(r"'(.)'", values), strict=False):
            bound[name] = value
    for op in Op:
        assert bound[f"OP_{op.name}"] == str(op.value), op
    for answer in Answer:
        assert bound[answer.name] == chr(answer.value), answer
    assert Op.ADD.value == 1 and ord("1") == Answer.NEW


def test_the_leaves_call_carries_each_leafs_fields_once() -> None:
    """dsbf_batch.lua's ARGV: the shared fields and each leaf's own are leaf_batch.lua's."""
    assert sorted(LEAVES_SHARED + LEAF_OWN) == sorted(LEAF_BATCH.argv)
    shared = {name: f"s-{name}" for name in LEAVES_SHARED}
    own = [({name: f"{i}-{name}" for name in LEAF_OWN}, [b"t"] * i) for i in range(3)]
    argv = leaves_argv({**shared, "op": Op.DROP}, own)
    assert argv[0] == int(Op.DROP) and argv[1 : len(LEAVES_SHARED)] == [
        shared[n] for n in LEAVES_SHARED[1:]
    ]
    assert len(argv) == len(LEAVES_SHARED) + sum(len(LEAF_OWN) + 1 + i for i in range(3))
