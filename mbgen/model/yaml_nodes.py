"""YAML reading that keeps line numbers, so every error can name the line at fault.

The one home of the limits of every file mbgen reads as YAML (mechanism files, study
files): its size (:data:`MAX_FILE_BYTES`, checked before it is read), its kind (a regular
file: a FIFO would block the reader), its nesting (:data:`MAX_DEPTH`, checked as it is
composed: PyYAML composes recursively, and a value 2 000 levels deep exhausted Python's
stack).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mbgen.errors import MechanismError


@dataclass
class Node:
    """A YAML node with its file and line, and helpers that fail with a located error."""

    raw: yaml.Node
    file: str
    key: str
    key_line: int = 0  # the line of its key in the parent mapping (0: not in a mapping)

    @property
    def line(self) -> int:
        return self.raw.start_mark.line + 1

    def error(self, message: str) -> MechanismError:
        return MechanismError(message, self.file, self.line, self.key)

    def is_mapping(self) -> bool:
        return isinstance(self.raw, yaml.MappingNode)

    def is_sequence(self) -> bool:
        return isinstance(self.raw, yaml.SequenceNode)

    def is_scalar(self) -> bool:
        return isinstance(self.raw, yaml.ScalarNode)

    def mapping(self, allowed: AbstractSet[str], required: AbstractSet[str] = frozenset(),
                listed: AbstractSet[str] | None = None) -> dict[str, Node]:
        """The mapping's children by key; unknown keys and missing required keys fail (an
        unknown key's error lists ``listed``, by default ``allowed``)."""
        children = self.children()
        for name, child in children.items():
            if name not in allowed:
                raise MechanismError(
                    f"unknown key {name!r} (allowed: "
                    f"{', '.join(sorted(allowed if listed is None else listed))})",
                    self.file, child.key_line, child.key)
        for name in sorted(required - children.keys()):
            raise self.error(f"missing required key {name!r}")
        return children

    def children(self) -> dict[str, Node]:
        """The mapping's children by key, whatever the keys (a duplicate key fails)."""
        if not self.is_mapping():
            raise self.error("expected a mapping of keys to values")
        children: dict[str, Node] = {}
        for key_node, value_node in self.raw.value:
            name = key_name(key_node, self.file, self.key)
            path = f"{self.key}.{name}" if self.key else name
            if name in children:
                raise MechanismError(f"duplicate key {name!r}", self.file,
                                     key_node.start_mark.line + 1, path)
            children[name] = Node(value_node, self.file, path, key_node.start_mark.line + 1)
        return children

    def sequence(self) -> Iterator[Node]:
        if not self.is_sequence():
            raise self.error("expected a list")
        for i, item in enumerate(self.raw.value):
            yield Node(item, self.file, f"{self.key}[{i}]")

    def scalar(self) -> Any:
        """The scalar's Python value (int, float, bool, str or None)."""
        if not self.is_scalar():
            raise self.error("expected a single value")
        return self._construct(lambda loader: loader.construct_object(self.raw))

    def is_null(self) -> bool:
        """True for an empty value (``key:`` with nothing after it)."""
        return self.is_scalar() and self.scalar() is None

    def boolean(self) -> bool:
        value = self.scalar()
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, got {value!r}")
        return value

    def string(self) -> str:
        value = self.scalar()
        if not isinstance(value, str):
            raise self.error(f"expected a string, got {value!r}")
        return value

    def integer(self) -> int:
        value = self.scalar()
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected an integer, got {value!r}")
        return value

    def plain(self) -> Any:
        """The node as plain Python data (for display-only data such as ``visual``)."""
        size = _expanded_size(self.raw)
        if size is None:
            raise self.error("a value that contains itself (a recursive alias)")
        if size > MAX_PLAIN_VALUES:  # written out to meta.json, a bomb took 7.7 GB
            raise self.error(f"more than {MAX_PLAIN_VALUES} values once aliases are "
                             "expanded (an alias bomb?)")
        return self._construct(lambda loader: loader.construct_document(self.raw))

    def _construct(self, build: Callable[[yaml.SafeLoader], Any]) -> Any:
        """Safe construction only: tags such as ``!!python/name`` are located errors."""
        try:
            return build(yaml.SafeLoader(" "))
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise self.error(f"unsupported YAML value: {problem}") from None


MAX_PLAIN_VALUES = 10_000  # values in display-only data (``visual``), aliases expanded
_PLAIN_TAGS = {f"tag:yaml.org,2002:{kind}" for kind in ("str", "int", "float", "bool", "null")}


def key_name(key: yaml.Node, file: str, parent: str) -> str:
    """A mapping key as text; a list, a mapping or an explicitly tagged value used as a key
    is a located error (its raw ``ScalarNode(...)`` repr was printed as the key)."""
    line = key.start_mark.line + 1
    if not isinstance(key, yaml.ScalarNode):
        kind = "list" if isinstance(key, yaml.SequenceNode) else "mapping"
        raise MechanismError(f"a key must be a name, got a {kind}", file, line, parent)
    if key.tag not in _PLAIN_TAGS:
        tag = key.tag.replace("tag:yaml.org,2002:", "!!")
        raise MechanismError(f"a key must be a name, got {key.value[:60]!r} tagged {tag}",
                             file, line, parent)
    return str(key.value)


def _expanded_size(root: yaml.Node) -> int | None:
    """Nodes of ``root`` with every alias expanded (capped just above the limit), in time
    proportional to the distinct nodes; None when a node contains itself."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # being expanded: the ancestors of the current node
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = [] if isinstance(node, yaml.ScalarNode) else (
            [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
            else list(node.value))
        if done:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in children),
                                  MAX_PLAIN_VALUES + 1)
        elif id(node) not in sizes:
            if id(node) in open_nodes or any(id(c) in open_nodes for c in children):
                return None
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


MAX_FILE_BYTES = 16 * 2**20  # the largest YAML file read (a 1000-bar chain: 0.12 MiB)
MAX_DEPTH = 64  # levels of nested mappings and lists (a mechanism file needs 6)


class _Bounded(yaml.SafeLoader):
    """Composes at most :data:`MAX_DEPTH` levels deep: deeper is a located error (the
    composer recurses once per level, so without a bound a deep value is a RecursionError
    or a stack overflow)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"values nested more than {MAX_DEPTH} levels deep",
                self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class Safe11Loader(_Bounded):
    """YAML 1.1 as PyYAML's SafeLoader reads it, nesting bounded."""


class Core12Loader(_Bounded):
    """YAML 1.2's core schema, which PyYAML (1.1) lacks: ``010`` is 10 (not octal 8),
    ``0o10`` is 8, ``1e3`` is a number, ``on``/``yes``/``off``/``no`` and ``1:20`` are
    text. Its integers are rewritten to decimal by :func:`_decimal_integers`, so PyYAML's
    own constructor reads them."""

    yaml_implicit_resolvers: dict = {}


for _tag, _pattern, _first in (
        ("null", r"~|null|Null|NULL|", "~nN"),
        ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
        ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
        ("float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                  r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", "-+.0123456789"),
        ("merge", r"<<", "<")):
    Core12Loader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}",
                                       re.compile(f"^(?:{_pattern})$"),
                                       [*_first, ""] if _tag == "null" else list(_first))

MAX_INTEGER_DIGITS = 100  # an integer literal longer than this is refused, not parsed
_DIRECTIVE_11 = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\n|%[^\n]*\n)*?%YAML[ \t]+1\.1[ \t]*(?:#|\n|$)")


def yaml_loader(text: str) -> type[yaml.SafeLoader]:
    """The file's declared YAML version decides: ``%YAML 1.1`` reads as PyYAML does;
    ``%YAML 1.2`` or no directive (as the reference implementation's yaml-cpp) as 1.2."""
    return Safe11Loader if _DIRECTIVE_11.match(text) else Core12Loader


def _decimal_integers(root: yaml.Node, file: str) -> None:
    """YAML 1.2 integers spelled so that PyYAML's 1.1 constructor reads the 1.2 value."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if node.tag == "tag:yaml.org,2002:int" and node.style is None:
                digits = node.value.lstrip("+-")
                if len(digits) > MAX_INTEGER_DIGITS:
                    raise MechanismError(f"an integer of {len(digits)} digits (at most "
                                         f"{MAX_INTEGER_DIGITS})", file,
                                         node.start_mark.line + 1)
                base = 8 if digits.startswith("0o") else 16 if digits.startswith("0x") else 10
                value = int(digits[2:] if base != 10 else digits, base)
                node.value = str(-value if node.value.startswith("-") else value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(item for pair in node.value for item in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def read_yaml_file(path: Path, what: str) -> str:
    """The text of the YAML file ``path`` (``what`` it is, for messages: "a mechanism
    file", "a study file"), refused with a located error before it is read when it is not
    a regular file (a FIFO blocks, a device never ends) or is larger than
    :data:`MAX_FILE_BYTES`, or when it is not UTF-8 (a byte-order mark is fine)."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            kind = ("a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO"
                    if stat.S_ISFIFO(info.st_mode) else "a device or socket")
            raise MechanismError(f"{kind}, not a regular file: {what} is read only from a "
                                 "regular file", str(path))
        if info.st_size > MAX_FILE_BYTES:
            raise MechanismError(f"{info.st_size / 2**20:.1f} MiB: {what} may have at most "
                                 f"{MAX_FILE_BYTES / 2**20:g} MiB", str(path))
        with open(path, "rb") as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise MechanismError(f"cannot read file: {exc.strerror}", str(path)) from exc
    if len(data) > MAX_FILE_BYTES:  # it grew since
        raise MechanismError(f"more than {MAX_FILE_BYTES / 2**20:g} MiB: {what} may have "
                             f"at most {MAX_FILE_BYTES / 2**20:g} MiB", str(path))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise MechanismError(f"not a UTF-8 text file (byte 0x{data[exc.start]:02x} at "
                             f"offset {exc.start})", str(path), line) from None


def read_document(text: str, file: str) -> Node:
    """Parse a whole mechanism file into a located root node."""
    loader = yaml_loader(text)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.reader.ReaderError as exc:  # a control character: it has no mark, only a position
        line = text.count("\n", 0, exc.position) + 1
        raise MechanismError(f"invalid YAML: unacceptable character U+{exc.character:04X} "
                             f"({exc.reason})", file, line) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where: int | None = mark.line + 1 if mark is not None else None
        raise MechanismError(f"invalid YAML: {getattr(exc, 'problem', exc)}", file,
                             where) from exc
    if root is None or (isinstance(root, yaml.ScalarNode) and root.value == ""):
        raise MechanismError("the file is empty", file, 1)
    if loader is Core12Loader:
        _decimal_integers(root, file)
    return Node(root, file, "")

