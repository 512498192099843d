"""The JSON Schema: generated from the loader's own format declarations, so a file the
schema rejects is one the loader rejects, at the same key and with the same choices."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from conftest import ALL_MECHANISMS, REPO, SHIPPED_DIR, mechanism_id

from mbgen.cli.main import cli
from mbgen.errors import MechanismError
from mbgen.model.format import SECTIONS
from mbgen.model.parser import parse_mechanism
from mbgen.model.schema import mechanism_schema, schema_text

SHIPPED_SCHEMA = REPO / "mbgen" / "model" / "mechanism.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(mechanism_schema())
BASE = (SHIPPED_DIR / "actuated-double-pendulum.yaml").read_text()


def test_the_schema_is_valid_and_the_shipped_copy_is_current() -> None:
    jsonschema.Draft202012Validator.check_schema(mechanism_schema())
    assert SHIPPED_SCHEMA.read_text() == schema_text(), \
        "regenerate with: mbgen schema --out mbgen/model/mechanism.schema.json"


def test_mbgen_schema_prints_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["schema"])
    assert result.exit_code == 0 and json.loads(result.output) == mechanism_schema()
    out = tmp_path / "m.schema.json"
    result = CliRunner().invoke(cli, ["schema", "--out", str(out)])
    assert result.exit_code == 0 and out.read_text() == schema_text()
    missing = tmp_path / "no-such-dir" / "m.schema.json"
    result = CliRunner().invoke(cli, ["schema", "--out", str(missing)])
    assert result.exit_code == 1 and "No such file or directory" in result.output
    assert str(missing) in " ".join(result.output.split()) and "Traceback" not in result.output


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_every_shipped_and_reference_file_validates(path: Path) -> None:
    errors = [e.message for e in VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


# (original text, replacement, key path the loader names): each edit of BASE breaks one
# rule that both the schema and the loader check.
INVALID = [
    ("  - {x: 0, y: 0, fixed: true", "  - {x: 0, y: 0, fixed: true, z: 1", "points[0].z"),
    ("  - {x: 0, y: 0, fixed: true", "  - {y: 0, fixed: true", "points[0]"),
    ("type: encoder", "type: lidar", "sensors[0].type"),
    ("type: encoder, coordinate: theta1", "type: encoder", "sensors[0]"),
    ("fixed: true", "fixed: yes please", "points[0].fixed"),
    ("- {type: RelativeAngleAbsoluteDOF", "- {type: Angle", "relative_coordinates[0].type"),
    ("planar_bodies:", "planar_body:", "planar_body"),
    ("mass: m1", "mass: [m1]", "planar_bodies[0].mass"),
    ("  m1: 0.6", "  x1: 0.6", "parameters.x1"),
]


def _path(error: jsonschema.ValidationError) -> str:
    text = ""
    for part in error.absolute_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


@pytest.mark.parametrize(("old", "new", "key"), INVALID, ids=[case[2] for case in INVALID])
def test_the_schema_and_the_loader_reject_the_same_key(old: str, new: str, key: str) -> None:
    assert old in BASE
    text = BASE.replace(old, new, 1)
    with pytest.raises(MechanismError) as caught:
        parse_mechanism(text, "bad.yaml")
    assert caught.value.key == key
    errors = list(VALIDATOR.iter_errors(yaml.safe_load(text)))
    assert errors, "the schema accepted a file the loader rejects"
    # a bad key name is reported on the key itself by the loader, on its mapping by the schema
    assert key in {_path(e) for e in errors} | {
        f"{_path(e)}.{name}" if _path(e) else name for e in errors
        for name in re.findall(r"'(\w+)' (?:was unexpected|should not be valid)", e.message)}
    allowed = re.search(r"\(allowed: ([^)]*)\)", str(caught.value))
    if allowed:  # the loader lists the same choices as the schema offers
        names = set(allowed.group(1).split(", "))
        offered = [set(e.schema.get("properties", {})) or set(e.schema.get("enum", []))
                   for e in errors]
        assert names in offered


def test_every_key_of_the_format_is_documented() -> None:
    doc = (REPO / "docs" / "format.md").read_text()
    missing = [f"{section}.{key}" for section, spec in SECTIONS.items() for key in spec.keys
               if f"`{key}`" not in doc and f"`{key}:`" not in doc]
    assert missing == []
