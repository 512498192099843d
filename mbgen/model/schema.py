"""JSON Schema of the mechanism format, generated from :data:`mbgen.model.format.SECTIONS`.

Editors with a YAML language server complete keys and flag mistakes with it. It checks
what a schema can (keys, required keys, value types, choices, the sensor's target key);
the loader checks the rest (names, expressions, geometry) with the same keys and choices.
"""

from __future__ import annotations

import json
from typing import Any

from mbgen.model.format import IDENTIFIER, RESERVED_NAME, SECTIONS, SENSOR_TARGET, Key

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

_KINDS: dict[str, dict[str, Any]] = {
    "expression": _EXPRESSION,
    "expression_or_auto": {"anyOf": [{"const": "auto"}, _EXPRESSION]},
    "expressions2": _PAIR,
    "offset": {"anyOf": [_EXPRESSION, _PAIR]},
    "point": _POINT,
    "points": _points(2),
    "point_pair": _points(2, 2),
    "body": {"type": "integer", "minimum": 0},
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


def _value(key: Key) -> dict[str, Any]:
    if key.kind == "choice":
        schema: dict[str, Any] = {"enum": list(key.choices)}
    elif key.kind == "section":
        schema = {"type": ["array", "null"], "items": {"$ref": f"#/$defs/{key.section}"}}
    else:
        schema = dict(_KINDS[key.kind])
    return {**schema, "description": key.doc}


def _object(name: str) -> dict[str, Any]:
    section = SECTIONS[name]
    schema: dict[str, Any] = {
        "type": "object", "description": section.doc,
        "properties": {key: _value(spec) for key, spec in section.keys.items()},
        "additionalProperties": False}
    if section.required:
        schema["required"] = sorted(section.required)
    return schema


def mechanism_schema() -> dict[str, Any]:
    """The whole schema as a JSON-ready dict (draft 2020-12)."""
    definitions = {name: _object(name) for name in SECTIONS if name != "mechanism"}
    definitions["sensor"]["allOf"] = [
        {"if": {"properties": {"type": {"const": kind}}, "required": ["type"]},
         "then": {"required": [target]}}
        for kind, target in SENSOR_TARGET.items()]
    return {"$schema": DRAFT, "title": "mbgen mechanism", **_object("mechanism"),
            "$defs": definitions}


def schema_text() -> str:
    return json.dumps(mechanism_schema(), indent=2, ensure_ascii=False) + "\n"
