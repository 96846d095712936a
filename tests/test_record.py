"""`@record` behaves as `@dataclass` does: each case defines the same class both ways and holds
the two side by side (construction, defaults, errors, equality, hash, repr, frozen, replace)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from meshplan.solver.record import record


def _pair(**options: bool) -> tuple[type, type]:
    """One class body under @dataclass and under @record."""

    def body() -> type:
        class Shape:
            """A value with every kind of field."""

            a: int
            b: str = "b"
            c: list[int] = field(default_factory=lambda: [1, 2])
            d: float = field(default=0.5, compare=False)
            e: dict = field(default_factory=dict, repr=False)
            f: int = field(default=7, init=False)
            g: tuple = field(default_factory=tuple, init=False, hash=False)

            def total(self) -> int:
                return self.a + len(self.c)

        return Shape

    return dataclass(**options)(body()), record(**options)(body())


OPTIONS = [{}, {"frozen": True}, {"eq": False}, {"frozen": True, "eq": False}, {"kw_only": True}]


def _same(make: object, args: tuple, kwargs: dict) -> tuple[object, object]:
    std, rec = make  # type: ignore[misc]
    return std(*args, **kwargs), rec(*args, **kwargs)


@pytest.mark.parametrize("options", OPTIONS)
def test_construction_defaults_and_repr_match(options: dict[str, bool]) -> None:
    std, rec = _pair(**options)
    args, kwargs = ((), {"a": 3, "c": [4]}) if options.get("kw_only") else ((3, "x"), {"e": {1: 2}})
    s, r = std(*args, **kwargs), rec(*args, **kwargs)
    assert vars(s) == vars(r) and list(vars(s)) == list(vars(r))  # same values, same order
    assert repr(s) == repr(r).replace(rec.__qualname__, std.__qualname__)
    assert r.total() == s.total() and r.f == 7 == s.f
    assert [f.name for f in dataclasses.fields(r)] == [f.name for f in dataclasses.fields(s)]
    assert dataclasses.asdict(r) == dataclasses.asdict(s)
    assert rec.__match_args__ == std.__match_args__
    r2 = dataclasses.replace(r, a=9)
    assert r2.a == 9 and r2.b == r.b and r2 is not r
    assert r.c is not rec(*args, **kwargs).c or "c" in kwargs  # a factory makes a new list


@pytest.mark.parametrize("options", OPTIONS)
def test_equality_and_hash_follow_dataclasses_rules(options: dict[str, bool]) -> None:
    std, rec = _pair(**options)
    kw = {"a": 1, "c": [2]}
    s1, s2, r1, r2 = std(**kw), std(**kw, d=9.0), rec(**kw), rec(**kw, d=9.0)
    assert (r1 == r2) == (s1 == s2)  # d is not compared
    assert (r1 == rec(a=2)) == (s1 == std(a=2))
    assert r1.__eq__(s1) is NotImplemented or not options.get("eq", True)
    assert (rec.__hash__ is None) == (std.__hash__ is None)
    assert _hashable(r1) == _hashable(s1)  # the dict field makes both unhashable when hashed


def _hashable(obj: object) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def test_a_frozen_record_hashes_its_compared_fields() -> None:
    @record(frozen=True)
    class Key:
        a: int
        b: tuple = ()
        c: float = field(default=0.0, compare=False)
        d: str = field(default="", hash=False)

    assert hash(Key(1, (2,), 3.0)) == hash(Key(1, (2,), 4.0, "x")) == hash((1, (2,)))
    assert {Key(1): "one"}[Key(1, c=9.0)] == "one"
    assert Key(1, d="x") != Key(1, d="y")  # d is compared, only left out of the hash


@pytest.mark.parametrize("options", OPTIONS)
def test_errors_match(options: dict[str, bool]) -> None:
    std, rec = _pair(**options)
    for args, kwargs in [
        ((), {}),
        ((1,), {"a": 1}),
        ((1, "b", [], 0.1, {}, 5), {}),
        ((), {"f": 1}),
    ]:
        if options.get("kw_only") and args:
            args, kwargs = args[:1], kwargs
        with pytest.raises(TypeError):
            std(*args, **kwargs)
        with pytest.raises(TypeError):
            rec(*args, **kwargs)
    r = rec(a=1)
    if options.get("frozen"):
        for obj in (r, std(a=1)):
            with pytest.raises(dataclasses.FrozenInstanceError):
                obj.a = 2  # type: ignore[misc]
            with pytest.raises(dataclasses.FrozenInstanceError):
                del obj.b  # type: ignore[misc]
    else:
        r.a = 2
        assert r.a == 2


@pytest.mark.parametrize("options", OPTIONS)
def test_copy_and_pickle_keep_the_value(options: dict[str, bool]) -> None:
    _, rec = _pair(**options)
    globals()["Shape"] = rec  # pickle finds the class by its module-level name
    rec.__qualname__ = "Shape"
    try:
        r = rec(a=4, c=[5])
        for other in (copy.copy(r), copy.deepcopy(r), pickle.loads(pickle.dumps(r))):
            assert vars(other) == vars(r)
    finally:
        del globals()["Shape"]


def test_post_init_runs_and_the_class_body_keeps_its_own_methods() -> None:
    @record(frozen=True)
    class Own:
        x: int
        y: int = 0

        def __post_init__(self) -> None:
            object.__setattr__(self, "y", self.x * 2)

        def __repr__(self) -> str:
            return "mine"

        def __hash__(self) -> int:
            return 42

    o = Own(3)
    assert (o.y, repr(o), hash(o)) == (6, "mine", 42)
    assert Own(3) == o and Own(4) != o


def test_a_dataclass_base_is_refused() -> None:
    @dataclass
    class Base:
        x: int

    with pytest.raises(TypeError, match="dataclass base"):

        @record
        class Child(Base):
            y: int
