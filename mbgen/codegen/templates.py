"""The one way generated text is written: Jinja templates (templates/) rendered with data.

Python hands the templates names, indices, sizes and expressions printed by the SymPy C
printer; statements, functions and declarations are the templates' (shared macros in
templates/c.j2). Free text from a user's file reaches them only through the escaping
filters below, so it never becomes code.
"""

from __future__ import annotations

from typing import Any

import jinja2

from mbgen.codegen.cache import templates_dir, user_cache_dir
from mbgen.escaping import c_comment, c_string


def template_text(name: str) -> str:
    return templates_dir().joinpath(name).read_text()


def c_double(value: float) -> str:
    """A double literal that reads back to the same value."""
    return repr(float(value))


def c_int(value: int) -> str:
    return str(int(value))


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """The templates compiled to Python once per installation (Jinja keys each by its
    source's checksum, writes by rename and ignores a damaged file): compiling them
    costs a cold build ~40 ms. None where the cache cannot be made."""
    directory = user_cache_dir() / "templates"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(directory))


def template_environment() -> jinja2.Environment:
    environment = jinja2.Environment(loader=jinja2.FunctionLoader(template_text),
                                     undefined=jinja2.StrictUndefined,
                                     keep_trailing_newline=True,
                                     bytecode_cache=_bytecode_cache())
    environment.filters.update(c_comment=c_comment, c_string=c_string, c_double=c_double,
                               c_int=c_int)
    return environment


def render(template: str, **context: Any) -> str:
    return template_environment().get_template(template).render(context)
