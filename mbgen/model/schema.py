"""JSON Schema of the mechanism format, generated from :data:`mbgen.model.format.SECTIONS`.

Editors with a YAML language server complete keys and flag mistakes with it. It checks
what a schema can (keys, required keys, value types, choices, the sensor's target key);
the loader checks the rest (names, expressions, geometry) with the same keys and choices.
"""

from __future__ import annotations

import json
from typing import Any

from mbgen.model.format import (
    DIMENSION_NAMES,
    IDENTIFIER,
    RELATIVE_TYPES,
    RELATIVE_TYPES_BY_DIMENSION,
    RESERVED_NAME,
    SECTIONS,
    SENSOR_TARGET,
    Key,
    Section,
)
from mbgen.model.urdf import CLOSURE, INCLUDE

DRAFT = "https://json-schema.org/draft/2020-12/schema"

_EXPRESSION = {"type": ["number", "string"],
               "description": "A number or an arithmetic expression in the parameters."}
_POINT = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": IDENTIFIER}]}


def _points(minimum: int, maximum: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": _POINT, "minItems": minimum}
    if maximum is not None:
        schema["maxItems"] = maximum
    return schema


_PAIR = {"type": "array", "items": _EXPRESSION, "minItems": 2, "maxItems": 2}
_TRIPLE = {"type": "array", "items": _EXPRESSION, "minItems": 3, "maxItems": 3}
_VECTOR = _POINT  # an index or a name

_KINDS: dict[str, dict[str, Any]] = {
    "expression": _EXPRESSION,
    "expression_or_auto": {"anyOf": [{"const": "auto"}, _EXPRESSION]},
    "expressions2": _PAIR,
    "expressions3": _TRIPLE,
    "gravity": {"type": "array", "items": _EXPRESSION, "minItems": 2, "maxItems": 3},
    "inertia": {"anyOf": [_TRIPLE, {"type": "array", "items": _EXPRESSION, "minItems": 6,
                                    "maxItems": 6}]},
    "offset": {"anyOf": [_EXPRESSION, {"type": "array", "items": _EXPRESSION,
                                       "minItems": 2, "maxItems": 3}]},
    "vector": _VECTOR,
    "vectors": {"type": "array", "items": _VECTOR},
    "direction": {"anyOf": [_VECTOR, _points(2, 2)]},
    "dimension": {"enum": [2, 3]},
    "point": _POINT,
    "points": _points(1),
    "point_pair": _points(2, 2),
    "body": _POINT,  # an index or a name
    "coordinate": {"type": "string"},
    "coordinates": {"type": "array", "items": {"type": "string"}},
    "name": {"type": "string", "pattern": IDENTIFIER},
    "text": {"type": "string"},
    "boolean": {"type": "boolean"},
    "parameters": {"type": ["object", "null"],
                   "propertyNames": {"pattern": IDENTIFIER, "not": {"pattern": RESERVED_NAME}},
                   "additionalProperties": _EXPRESSION},
    "any": {},
}


def _value(key: Key, dimension: int) -> dict[str, Any]:
    if key.kind == "choice":
        choices = RELATIVE_TYPES_BY_DIMENSION[dimension] if (
            key.choices == RELATIVE_TYPES) else key.choices
        schema: dict[str, Any] = {"enum": list(choices)}
    elif key.kind == "section":
        schema = {"type": ["array", "null"],
                  "items": {"$ref": f"#/$defs/{DIMENSION_NAMES[dimension]}_{key.section}"}}
    else:
        schema = dict(_KINDS[key.kind])
    return {**schema, "description": key.doc}


def _object(name: str, dimension: int) -> dict[str, Any]:
    """A section's keys in files of ``dimension`` (2 or 3)."""
    return _section_object(SECTIONS[name], dimension)


def _section_object(section: Section, dimension: int) -> dict[str, Any]:
    keys = {key: spec for key, spec in section.keys.items()
            if spec.dimension in (None, dimension)}
    schema: dict[str, Any] = {
        "type": "object", "description": section.doc,
        "properties": {key: _value(spec, dimension) for key, spec in keys.items()},
        "additionalProperties": False}
    required = sorted(section.required & keys.keys())
    if required:
        schema["required"] = required
    return schema


def mechanism_schema() -> dict[str, Any]:
    """The whole schema as a JSON-ready dict (draft 2020-12): planar files, or spatial ones
    (``dimension: 3``), each with the keys of its dimension only."""
    definitions: dict[str, Any] = {}
    for dimension, kind in DIMENSION_NAMES.items():
        definitions[kind] = _object("mechanism", dimension)
        definitions.update({f"{kind}_{name}": _object(name, dimension)
                            for name in SECTIONS if name != "mechanism"})
        definitions[f"{kind}_sensor"]["allOf"] = [
            {"if": {"properties": {"type": {"const": sensor}}, "required": ["type"]},
             "then": {"required": [target]}}
            for sensor, target in SENSOR_TARGET.items()]
    # a file with a ``urdf`` key includes a robot (mbgen.model.urdf): its own few keys
    definitions["urdf_include"] = _section_object(INCLUDE, 3)
    definitions["spatial_closure"] = _section_object(CLOSURE, 3)
    return {"$schema": DRAFT, "title": "mbgen mechanism",
            "description": SECTIONS["mechanism"].doc,
            "if": {"type": "object", "required": ["urdf"]},
            "then": {"$ref": "#/$defs/urdf_include"},
            "else": {"if": {"type": "object", "properties": {"dimension": {"const": 3}},
                            "required": ["dimension"]},
                     "then": {"$ref": "#/$defs/spatial"}, "else": {"$ref": "#/$defs/planar"}},
            "$defs": definitions}


def schema_text() -> str:
    return json.dumps(mechanism_schema(), indent=2, ensure_ascii=False) + "\n"
