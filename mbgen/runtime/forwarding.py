"""How :class:`~mbgen.runtime.compiled.CompiledMechanism` shows its parts' members as its
own: ``mech.forward_dynamics`` is ``mech.dynamics.forward_dynamics``, with one signature
and one docstring, both the part's.

A :class:`Forward` is named in the face's class body, one line per member, so the face's
members stay explicit and greppable, and mypy sees each one's full signature. It is not
``__getattr__``: nothing is forwarded that the class body does not name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


class Forward(Generic[P, R]):
    """A method of the face that is ``method`` of the part in the attribute ``part``.

    The first access on a mechanism stores the part's bound method in the mechanism's
    ``__dict__`` (this is a non-data descriptor, like a method), so every later call
    costs what calling the part directly costs: no wrapper frame on the hot paths.
    """

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self.method = method
        self.name = method.__name__

        def on_host(host: Any, *args: P.args, **kwargs: P.kwargs) -> R:
            return getattr(getattr(host, part), method.__name__)(*args, **kwargs)

        # read on the class, the member is a function of the mechanism, like a method:
        # Face.member(mech, ...) works, and help() shows the part's signature and text
        self.on_host = functools.wraps(method)(on_host)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.on_host.__name__ = name
        self.on_host.__qualname__ = f"{owner.__qualname__}.{name}"

    @overload
    def __get__(self, host: None, owner: type) -> Callable[Concatenate[Any, P], R]: ...

    @overload
    def __get__(self, host: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, host: object | None, owner: type) -> Callable[..., R]:
        if host is None:
            return self.on_host
        bound: Callable[P, R] = getattr(getattr(host, self.part), self.method.__name__)
        host.__dict__[self.name] = bound
        return bound


def documented_by(source: object) -> Callable[[F], F]:
    """Gives a forwarding function (a property's getter) the docstring of what it forwards
    to, so the text lives in one place."""
    def document(function: F) -> F:
        function.__doc__ = source.__doc__
        return function
    return document
