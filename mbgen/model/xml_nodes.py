"""XML reading that keeps line numbers, for URDF files: hostile input read in bounded work.

Why not ``xml.etree``: its C parser hides expat, so a document type declaration (the door
to entity expansion, "billion laughs", and to external entities that read other files)
cannot be refused before it is expanded. Here expat itself is driven: any ``<!DOCTYPE``,
entity declaration or external reference is a located error, nothing is fetched, and the
file's size (the one file reader's limit, :func:`read_yaml_file`) and nesting
(:data:`MAX_DEPTH`) are bounded as in YAML files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn
from xml.parsers import expat

from mbgen.errors import MechanismError
from mbgen.model.yaml_nodes import MAX_DEPTH, read_yaml_file

MAX_ELEMENTS = 200_000  # elements in one file (g1 with its hands has about 1 500)


@dataclass
class Element:
    """One XML element: its tag, attributes, children and the line its start tag is on."""

    tag: str
    attributes: dict[str, str]
    line: int
    file: str
    children: list[Element] = field(default_factory=list)

    def where(self) -> str:
        """The element as a message names it: ``<joint name="elbow">``."""
        name = self.attributes.get("name")
        return f"<{self.tag} name={name!r}>" if name is not None else f"<{self.tag}>"

    def error(self, message: str) -> MechanismError:
        return MechanismError(message, self.file, self.line, self.where())

    def all(self, tag: str) -> list[Element]:
        return [child for child in self.children if child.tag == tag]

    def one(self, tag: str, required: bool = False) -> Element | None:
        """The child ``tag`` (at most one), or None."""
        found = self.all(tag)
        if len(found) > 1:
            raise found[1].error(f"a second <{tag}> in {self.where()}")
        if not found and required:
            raise self.error(f"{self.where()} needs a <{tag}> element")
        return found[0] if found else None

    def text(self, name: str, default: str | None = None) -> str:
        """The attribute ``name``, or ``default`` where it is absent (None: required)."""
        value = self.attributes.get(name, default)
        if value is None:
            raise self.error(f"{self.where()} needs the attribute {name!r}")
        return value

    def numbers(self, name: str, count: int, default: str | None = None) -> list[float]:
        """The attribute ``name`` as ``count`` finite numbers separated by spaces."""
        text = self.text(name, default)
        try:
            values = [float(item) for item in text.split()]
        except ValueError:
            raise self.error(f"{name}={text!r} is not {count} number(s)") from None
        if len(values) != count or not all(abs(v) <= 1e15 for v in values):
            raise self.error(f"{name}={text!r} is not {count} finite number(s) "
                             "(at most 1e15 in magnitude)")
        return values


def read_xml_file(path: Path, what: str) -> Element:
    """The root element of the XML file ``path`` (``what`` it is, for messages)."""
    text = read_yaml_file(path, what)  # the one file reader: regular, bounded, UTF-8
    return parse_xml(text, str(path))


def parse_xml(text: str, file: str) -> Element:
    """Parse ``text``; a DTD, an entity or malformed XML is a located error."""
    parser = expat.ParserCreate(encoding="UTF-8")
    stack: list[Element] = []
    roots: list[Element] = []
    count = 0

    def refuse(message: str) -> NoReturn:
        raise MechanismError(message, file, parser.CurrentLineNumber)

    def start(tag: str, attributes: dict[str, str]) -> None:
        nonlocal count
        count += 1
        if count > MAX_ELEMENTS:
            refuse(f"more than {MAX_ELEMENTS} elements")
        if len(stack) >= MAX_DEPTH:
            refuse(f"elements nested more than {MAX_DEPTH} deep")
        element = Element(tag, dict(attributes), parser.CurrentLineNumber, file)
        (stack[-1].children if stack else roots).append(element)
        stack.append(element)

    def end(_tag: str) -> None:
        stack.pop()

    def doctype(*_args: object) -> None:
        refuse("a document type declaration (<!DOCTYPE ...>) is refused: entities could "
               "expand without bound or read other files")

    def entity(*_args: object) -> None:
        refuse("an entity declaration is refused")

    def external(*_args: object) -> int:
        refuse("an external entity is refused")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = entity
    parser.UnparsedEntityDeclHandler = entity
    parser.ExternalEntityRefHandler = external
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        parser.Parse(text.encode("utf-8"), True)
    except expat.ExpatError as exc:
        raise MechanismError(f"invalid XML: {expat.ErrorString(exc.code)}", file,
                             exc.lineno) from None
    if not roots:
        raise MechanismError("the file has no XML element", file, 1)
    return roots[0]
