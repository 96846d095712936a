"""`@record`: a dataclass whose methods are made without code generation, for the value classes
that a process builds a few of but imports every time.

`dataclasses.dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` and
(frozen) `__setattr__` and `__delattr__` as source text and compiles it with `exec` when the
class is defined (CPython 3.11 Lib/dataclasses.py `_create_fn`): ~2 ms for a class of forty
fields, and a fifth of the instructions of the command line's first plan went to it. `record`
lets dataclasses read the fields (so `dataclasses.fields`, `replace`, `asdict` and
`is_dataclass` work as before) and gives the methods as closures over the fields, made without
compiling anything. They behave as dataclasses' do (the same arguments, defaults, factories,
equality, hash, repr and frozen errors: tests/test_record.py holds them side by side); the
`__init__` reads its arguments in a loop, a few microseconds more per instance, so classes made
in the thousands in a plan's inner loops stay plain dataclasses.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")
_MISSING = dataclasses.MISSING


@overload
def record(cls: type[T], /) -> type[T]: ...


@overload
def record(
    *, frozen: bool = False, eq: bool = True, kw_only: bool = False
) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(
    cls: type[T] | None = None, /, *, frozen: bool = False, eq: bool = True, kw_only: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """As `dataclasses.dataclass(cls, frozen=..., eq=..., kw_only=...)` with the other options at
    their defaults (init, repr, match_args; no order, slots or unsafe_hash)."""

    def wrap(c: type[T]) -> type[T]:
        return _build(c, frozen=frozen, eq=eq, kw_only=kw_only)

    return wrap if cls is None else wrap(cls)


def _build(cls: type[T], *, frozen: bool, eq: bool, kw_only: bool) -> type[T]:
    if any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:]):
        raise TypeError(f"@record {cls.__qualname__}: a dataclass base is not supported")
    own = set(vars(cls))  # methods the class body defines itself win, as with dataclasses
    class_hash = vars(cls).get("__hash__", _MISSING)  # None when the body defines only __eq__
    explicit_hash = not (class_hash is _MISSING or (class_hash is None and "__eq__" in own))
    if not cls.__doc__:  # else dataclasses reads object.__init__'s text signature (tokenize)
        cls.__doc__ = f"{cls.__name__}({', '.join(getattr(cls, '__annotations__', {}))})"
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
    fields = dataclasses.fields(cls)
    name = cls.__qualname__
    setters = ((f.name, f.init, f.default, f.default_factory) for f in fields)
    plan = tuple(s for s in setters if s[1] or s[3] is not _MISSING)  # what __init__ sets
    positional = tuple(f.name for f in fields if f.init and not f.kw_only)
    accepted = frozenset(f.name for f in fields if f.init)
    post_init = hasattr(cls, "__post_init__")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        if len(args) > len(positional):
            raise TypeError(
                f"{name}.__init__() takes {len(positional) + 1} positional arguments but "
                f"{len(args) + 1} were given"
            )
        given = dict(zip(positional, args, strict=False))
        for key in kwargs:
            if key not in accepted:
                raise TypeError(f"{name}.__init__() got an unexpected keyword argument {key!r}")
            if key in given:
                raise TypeError(f"{name}.__init__() got multiple values for argument {key!r}")
        given.update(kwargs)
        values = self.__dict__  # written directly: a frozen instance refuses setattr
        missing = []
        for key, init, default, factory in plan:
            if init and key in given:
                values[key] = given[key]
            elif factory is not _MISSING:
                values[key] = factory()
            elif default is not _MISSING:
                values[key] = default
            else:
                missing.append(key)
        if missing:
            raise TypeError(
                f"{name}.__init__() missing {len(missing)} required argument"
                f"{'s' if len(missing) > 1 else ''}: {', '.join(map(repr, missing))}"
            )
        if post_init:
            self.__post_init__()

    shown = tuple(f.name for f in fields if f.repr)

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:  # noqa: N807
        inner = ", ".join(f"{k}={getattr(self, k)!r}" for k in shown)
        return f"{type(self).__qualname__}({inner})"

    methods: dict[str, Any] = {"__init__": __init__, "__repr__": __repr__}
    if eq:
        compared = _key(tuple(f.name for f in fields if f.compare))

        def __eq__(self: Any, other: Any) -> Any:  # noqa: N807
            if other.__class__ is self.__class__:
                return compared(self) == compared(other)
            return NotImplemented

        methods["__eq__"] = __eq__
        if not explicit_hash:  # dataclasses' rule: eq without frozen is unhashable
            methods["__hash__"] = None
            if frozen:
                hashed = _key(
                    tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
                )

                def __hash__(self: Any) -> int:  # noqa: N807
                    return hash(hashed(self))

                methods["__hash__"] = __hash__
    if frozen:
        names = frozenset(f.name for f in fields)

        def __setattr__(self: Any, key: str, value: Any) -> None:  # noqa: N807
            if type(self) is cls or key in names:
                raise dataclasses.FrozenInstanceError(f"cannot assign to field {key!r}")
            super(cls, self).__setattr__(key, value)

        def __delattr__(self: Any, key: str) -> None:  # noqa: N807
            if type(self) is cls or key in names:
                raise dataclasses.FrozenInstanceError(f"cannot delete field {key!r}")
            super(cls, self).__delattr__(key)

        methods |= {"__setattr__": __setattr__, "__delattr__": __delattr__}
    for key, method in methods.items():
        if key in own and (key != "__hash__" or explicit_hash):
            if frozen and key in ("__setattr__", "__delattr__"):
                raise TypeError(f"Cannot overwrite attribute {key} in class {name}")
            continue
        if method is not None:
            method.__qualname__ = f"{name}.{key}"
        setattr(cls, key, method)
    return cls


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """The tuple of these attributes (attrgetter gives a bare value for one name, fails on none)."""
    if not names:
        return lambda _: ()
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return attrgetter(*names)
