"""Free text (a mechanism's ``name:``, a file's name) on its way into generated code or a
picture: one escaping function per target, so no text from a file ever becomes code.

Names that become identifiers (packages, modules, C symbols) are not escaped but checked
against a strict grammar where they are chosen; everything else goes through here.
"""

from __future__ import annotations

import html
import re

_UNSAFE_IN_COMMENT = re.compile(r"\*/|/\*|\?\?|[^\x20-\x7e]")


def c_comment(text: object) -> str:
    """``text`` safe inside a C block comment: printable ASCII only, no ``*/`` or ``/*``
    (which would end or nest the comment), no ``??`` (a trigraph under -std=c99)."""
    return _UNSAFE_IN_COMMENT.sub(lambda m: "?" if len(m.group()) == 1 else
                                  m.group()[0] + " " + m.group()[1], str(text))


def c_string(text: object) -> str:
    """``text`` as a C string literal: printable ASCII but ``"`` ``\\`` and ``?`` as is,
    every other byte of its UTF-8 as a three-digit octal escape (which a following digit
    cannot extend)."""
    out = []
    for byte in str(text).encode("utf-8", "surrogatepass"):
        char = chr(byte)
        safe = 0x20 <= byte <= 0x7E and char not in '"\\?'
        out.append(char if safe else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def python_literal(text: object) -> str:
    """``text`` as a Python string literal (``repr``); never to be put in a docstring."""
    return repr(str(text))


def mathtext(text: object) -> str:
    """``text`` shown literally by Matplotlib, whose labels parse ``$...$`` as math."""
    return str(text).replace("$", r"\$")


def html_text(text: object) -> str:
    """``text`` shown literally in HTML, and in Plotly's labels (which read a subset of
    HTML tags: ``<b>``, ``<br>``, ``<a href>``): ``&``, ``<``, ``>``, ``"`` and ``'`` as
    entities."""
    return html.escape(str(text), quote=True)
