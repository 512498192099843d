"""Bad mechanism files fail with a MechanismError that names the file, line and key."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import bounded_time, reference

import mbgen
from mbgen.errors import MbgenError, MechanismError
from mbgen.model import load_mechanism

# A valid two-body file; each case below rewrites one line of it.
VALID = textwrap.dedent("""\
    %YAML 1.2
    ---
    parameters:
      L: 1.0
    points:
      - {x: 0, y: 0, fixed: true}
      - {x: L, y: 0}
      - {x: 2*L, y: 0}
    planar_bodies:
      - points: [0, 1]
        length: L
        mass: 1.0
        I0: (1/3)*mass*length^2
        cog: [0.5*length, 0.0]
      - points: [1, 2]
        mass: 2.0
    """)


def write(tmp_path: Path, text: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def replace_line(line: int, new: str) -> str:
    """VALID with its 1-based ``line`` replaced by ``new`` (indentation included)."""
    lines = VALID.splitlines()
    lines[line - 1] = new
    return "\n".join(lines) + "\n"


def expect_error(path: Path, line: int | None, key: str | None, *fragments: str
                 ) -> MechanismError:
    with pytest.raises(MechanismError) as info:
        load_mechanism(path)
    err = info.value
    assert err.file == str(path)
    assert err.line == line
    assert err.key == key
    message = str(err)
    where = f"{path}:{line}" if line is not None else str(path)
    if key:
        where += f" [{key}]"
    assert message.startswith(where + ": "), message
    for fragment in fragments:
        assert fragment in message, message
    return err


def test_valid_base_file_loads(tmp_path: Path) -> None:
    mechanism = load_mechanism(write(tmp_path, VALID, "good.yaml"))
    assert mechanism.coordinate_names == ["x1", "y1", "x2", "y2"]
    assert [b.points for b in mechanism.bodies] == [(0, 1), (1, 2)]


@pytest.mark.parametrize(("line", "new", "err_line", "key", "fragments"), [
    pytest.param(3, "parameter:", 3, "parameter", ("unknown key 'parameter'", "allowed:"),
                 id="unknown-top-level-key"),
    pytest.param(6, "  - {x: 0, y: 0, fixd: true}", 6, "points[0].fixd",
                 ("unknown key 'fixd'", "allowed: fixed, name, x, y"),
                 id="unknown-key-in-point"),
    pytest.param(7, "  - {x: Lx, y: 0}", 7, "points[1].x",
                 ("unknown name", "'Lx' at column 1"), id="unknown-name-in-expression"),
    pytest.param(8, "  - {x: 2*L + sinh(1), y: 0}", 8, "points[2].x",
                 ("unknown function", "'sinh' at column 7"),
                 id="unknown-function-in-expression"),
    pytest.param(6, "  - {x: 0, y: 0, fixed: maybe}", 6, "points[0].fixed",
                 ("expected true or false", "'maybe'"), id="fixed-maybe"),
    pytest.param(10, "  - points: 3", 10, "planar_bodies[0].points", ("expected a list",),
                 id="body-points-not-a-list"),
    pytest.param(10, "  - points: [0, 7]", 10, "planar_bodies[0].points[1]",
                 ("point 7 does not exist",), id="body-missing-point"),
    pytest.param(10, "  - points: [0]", 10, "planar_bodies[0].points",
                 ("expected at least 2 points, got 1",), id="body-one-point"),
    pytest.param(10, "  - points: [1, 1]", 10, "planar_bodies[0].points",
                 ("points must be distinct",), id="body-repeated-point"),
    pytest.param(13, "    I0: 0.1", 13, "planar_bodies[0].I0",
                 ("I0 = 0.1 is smaller than mass*|cog|^2 = 0.25",), id="inertia-too-small"),
    pytest.param(12, "    mass: -1", 12, "planar_bodies[0].mass",
                 ("mass must not be negative",), id="negative-mass"),
    pytest.param(14, "    cog: [0.5*length]", 14, "planar_bodies[0].cog",
                 ("cog must be a list [x, y]",), id="cog-one-component"),
    pytest.param(6, "  - {x: 0, y: 0, x: 1, fixed: true}", 6, "points[0].x",
                 ("duplicate key 'x'",), id="duplicate-key-in-point"),
    pytest.param(11, "    length: 0", 11, "planar_bodies[0].length",
                 ("length must be positive, got 0",), id="zero-length"),
    pytest.param(11, "    length: 1 - 2*L", 11, "planar_bodies[0].length",
                 ("length must be positive, got -1",), id="negative-length"),
    pytest.param(6, "  - {x: 0, y: 0, [fixed]: true}", 6, "points[0]",
                 ("a key must be a name, got a list",), id="list-as-key"),
    pytest.param(4, "  ? {a: 1}\n  : 2", 4, "parameters",
                 ("a key must be a name, got a mapping",), id="mapping-as-parameter-name"),
    pytest.param(4, "  !!python/name:os.system L: 1.0", 4, "parameters",
                 ("a key must be a name, got 'L' tagged !!python/name:os.system",),
                 id="tagged-key"),
    pytest.param(12, "    mass: 9e18", 12, "planar_bodies[0].mass",
                 ("'9e18' is larger than 1e+15 in magnitude",), id="mass-9e18"),
    pytest.param(12, "    mass: 1e15*1e15*1e15*1e15*1e15*1e15*1e15", 12,
                 "planar_bodies[0].mass", ("makes an exact number of more than 100 digits",),
                 id="mass-product-of-literals"),
    pytest.param(4, "  L: sqrt(-1)", 4, "parameters.L",
                 ("does not evaluate to a real number",), id="complex-parameter"),
    pytest.param(12, "    # mass removed", 10, "planar_bodies[0]",
                 ("missing required key 'mass'",), id="missing-mass"),
])
def test_located_errors(tmp_path: Path, line: int, new: str, err_line: int, key: str,
                        fragments: tuple[str, ...]) -> None:
    path = write(tmp_path, replace_line(line, new))
    err = expect_error(path, err_line, key, *fragments)
    assert "Node(" not in str(err) and "coincide" not in str(err)


def test_body_inertia_check_includes_off_axis_cog(tmp_path: Path) -> None:
    # |cog|^2 = 0.3^2 + 0.4^2 = 0.25; with mass 4 the bound is 1.0.
    text = replace_line(14, "    cog: [0.3, 0.4]").replace("mass: 1.0", "mass: 4.0")
    text = text.replace("I0: (1/3)*mass*length^2", "I0: 0.99")
    expect_error(write(tmp_path, text), 13, "planar_bodies[0].I0",
                 "I0 = 0.99 is smaller than mass*|cog|^2 = 1")
    # ... and exactly at the bound it is accepted (a point mass at the cog).
    load_mechanism(write(tmp_path, text.replace("I0: 0.99", "I0: 1.0"), "ok.yaml"))


def test_duplicate_top_level_key(tmp_path: Path) -> None:
    text = VALID + "points:\n  - {x: 0, y: 0}\n"
    expect_error(write(tmp_path, text), 17, "points", "duplicate key 'points'")


def test_unknown_relative_coordinate_type(tmp_path: Path) -> None:
    text = VALID + "relative_coordinates:\n  - type: Slider\n    points: [0, 1]\n"
    expect_error(write(tmp_path, text), 18, "relative_coordinates[0].type",
                 "unknown relative coordinate type 'Slider'")


def test_top_level_key_that_is_not_a_name(tmp_path: Path) -> None:
    text = VALID.replace("parameters:", "? [a, b]\n: 1\nparameters:")
    err = expect_error(write(tmp_path, text), 3, "", "a key must be a name, got a list")
    assert "ScalarNode" not in str(err)


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("points: [1, 2\nplanar_bodies: []\n", 2, "invalid YAML"),
    ("parameters:\n  L: 1.0\x00\n", 2, "unacceptable character U+0000"),
    ("points:\n  - {x: 0, y: 0}\n\tbad: 1\n", 3, "invalid YAML"),
    ("points: {x: 0\n", 2, "invalid YAML"),
])
def test_invalid_yaml(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    expect_error(write(tmp_path, text), line, None, fragment)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    expect_error(write(tmp_path, text), 1, None, "the file is empty")


def test_empty_document_after_header(tmp_path: Path) -> None:
    path = write(tmp_path, "%YAML 1.2\n---\n")
    with pytest.raises(MechanismError) as info:
        load_mechanism(path)
    assert info.value.file == str(path)
    assert info.value.line is not None


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    expect_error(write(tmp_path, "- 1\n- 2\n"), 1, "", "expected a mapping")


def test_missing_points_section(tmp_path: Path) -> None:
    expect_error(write(tmp_path, "parameters:\n  L: 1\n"), 1, "",
                 "missing required key 'points'")


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(MechanismError) as info:
        load_mechanism(missing)
    assert info.value.file == str(missing)
    assert "cannot read file" in str(info.value)


def test_mechanism_error_is_an_mbgen_error() -> None:
    err = MechanismError("boom", "f.yaml", 3, "points[0].x")
    assert isinstance(err, MbgenError)
    assert str(err) == "f.yaml:3 [points[0].x]: boom"
    assert (err.message, err.file, err.line, err.key) == ("boom", "f.yaml", 3, "points[0].x")


def _tree(directory: Path) -> list[str]:
    if not directory.exists():
        return []
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


@pytest.mark.parametrize(("line", "new"), [
    (7, "  - {x: Lx, y: 0}"),
    (13, "    I0: 0.1"),
    (10, "  - points: [0, 7]"),
])
def test_bad_file_leaves_nothing_in_out_dir(tmp_path: Path, line: int, new: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(MechanismError):
        mbgen.load(str(write(tmp_path, replace_line(line, new))), out_dir=str(out))
    assert _tree(out) == []


def test_bad_edit_keeps_previous_build_and_adds_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = tmp_path / "pendulum1.yaml"
    shutil.copy(reference("pendulum1"), path)
    good = mbgen.load(str(path), out_dir=str(out))
    before = _tree(out)
    assert before, "the good build must exist"
    path.write_text(path.read_text().replace("mass: 5.0", "mass: heavy"))
    with pytest.raises(MechanismError) as info:
        mbgen.load(str(path), out_dir=str(out))
    assert info.value.key == "planar_bodies[0].mass"
    assert "'heavy'" in str(info.value)
    assert _tree(out) == before
    assert (good.directory / "meta.json").is_file()


@pytest.mark.parametrize(("value", "fragment"), [
    (".inf", "inf is not a finite number"),
    (".nan", "nan is not a finite number"),
    ("1e999999999", "'1e999999999' is not a finite number"),
    ("9e18", "larger than 1e+15 in magnitude"),
    ("9^9^9^9", "exponent 3.8742e+08 is larger than 100"),
    ("2^1000000000", "exponent 1e+09 is larger than 100"),
    ("(L - 1)^1000000", "exponent 1e+06 is larger than 100"),
    ("10^16", "a power larger than 1e+15"),
    ("(" * 300 + "1" + ")" * 300, "nested deeper than 50 levels"),
    ("-" * 1000 + "1", "nested deeper than 50 levels"),
    ("(" * 5000 + "1" + ")" * 5000, "longer than 2000 characters"),
    ("-" * 10_000 + "1", "longer than 2000 characters"),
    ("1e308", "'1e308' is larger than 1e+15 in magnitude"),
    ("1.0e999", "'1.0e999' is not a finite number"),
    ("*".join(["1e15"] * 8), "makes an exact number of more than 100 digits"),
    ("(" + "*".join(["1e15"] * 21) + ")^2", "a power larger than 1e+15"),
    ("2^(" + "*".join(["1e15"] * 21) + ")", "is larger than 100"),
])
def test_runaway_numbers_and_nesting_are_located_errors(tmp_path: Path, value: str,
                                                       fragment: str) -> None:
    """Each would otherwise hang SymPy, overflow, or raise RecursionError or TypeError."""
    text = (VALID.replace("- {x: L, y: 0}", f"- {{x: L, y: {value}}}") if "L" in value
            else VALID.replace("  L: 1.0", f"  L: {value}"))
    with bounded_time(200), pytest.raises(MechanismError, match=r"bad\.yaml:\d+") as error:
        load_mechanism(write(tmp_path, text))
    assert fragment in str(error.value)


def test_division_by_zero_is_a_located_error(tmp_path: Path) -> None:
    text = VALID.replace("  L: 1.0", "  L: 1/0")
    with pytest.raises(MechanismError, match=r"bad\.yaml:4 \[parameters\.L\]: '1/0' is not "
                                             r"finite"):
        load_mechanism(write(tmp_path, text))


@pytest.mark.parametrize(("section", "line", "key", "fragment"), [
    ("friction:\n  - {coordinate: z9, viscous: 1}\n", 18, "friction[0].coordinate",
     "unknown coordinate 'z9'"),
    ("friction:\n  - {coordinate: x1, coulomb: -1}\n", 18, "friction[0].coulomb",
     "must not be negative"),
    ("friction:\n  - {coordinate: x1, coulomb: 1, stiction_velocity: 0}\n", 18,
     "friction[0].stiction_velocity", "positive number"),
    ("friction:\n  - {coordinate: x1, viscous: 1}\n  - {coordinate: x1, coulomb: 1}\n", 19,
     "friction[1].coordinate", "already has friction"),
    ("friction:\n  - {coordinate: x1, drag: 1}\n", 18, "friction[0].drag", "unknown key"),
    ("sensors:\n  - {type: position, point: 1, offset: 0.1}\n", 18, "sensors[0].offset",
     "this sensor's offset is a list of 2 values"),
    ("sensors:\n  - {type: gyroscope, body: 0, noise: 0}\n", 18, "sensors[0].noise",
     "the standard deviation of its readings, > 0; got 0"),
    ("sensors:\n  - {type: gyroscope, body: 0, noise: -0.05}\n", 18, "sensors[0].noise",
     "got -0.05"),
    ("actuators:\n  - {coordinate: x1, gain: q}\n", 18, "actuators[0].gain", "unknown name"),
    ("relative_coordinates:\n  - {type: RelativeAngle, points: [0, 1, 2, 2]}\n", 18,
     "relative_coordinates[0].points", "b1 != b2"),
])
def test_friction_actuator_and_sensor_errors(tmp_path: Path, section: str, line: int,
                                             key: str, fragment: str) -> None:
    expect_error(write(tmp_path, VALID + section), line, key, fragment)


def test_relative_angle_between_segments_sharing_a_point(tmp_path: Path) -> None:
    text = VALID + "relative_coordinates:\n  - {type: RelativeAngle, points: [0, 1, 1, 2]}\n"
    angle = load_mechanism(write(tmp_path, text)).relative_angles[0]
    assert angle.points == (0, 1, 1, 2)


@pytest.mark.parametrize(("value", "fragment"), [
    ("p{k}*(p{k} + 1)", "grows to more than 20000 terms once the names it uses are substituted"),
    ("sin(p{k})", "is nested deeper than 200 levels once the names it uses are substituted"),
    ("1e15*p{k}", "makes an exact number of more than 100 digits"),
])
def test_derived_parameters_cannot_run_away(tmp_path: Path, value: str, fragment: str) -> None:
    """Each derived parameter is small, but the chain doubles the tree (SymPy then hung),
    nests it past the recursion limit, or grows an exact number to thousands of digits."""
    chain = "".join(f"  p{k + 1}: {value.format(k=k)}\n" for k in range(300))
    text = VALID.replace("  L: 1.0", "  L: 1.0\n  p0: L\n" + chain)
    with bounded_time(200), pytest.raises(
            MechanismError, match=r"bad\.yaml:\d+ \[parameters\.p\d+\]") as error:
        load_mechanism(write(tmp_path, text))
    assert fragment in str(error.value)


def test_five_thousand_parameters_load_quickly(tmp_path: Path) -> None:
    """Each parameter substituted every other one: 5 000 took minutes."""
    many = "".join(f"  p{k}: {k}.5\n" for k in range(5000))
    path = write(tmp_path, VALID.replace("  L: 1.0", "  L: 1.0\n" + many))
    with bounded_time(400):
        mechanism = load_mechanism(path)
    assert len(mechanism.parameters) == 5001 and mechanism.parameters[-1].value == 4999.5


@pytest.mark.parametrize(("visual", "line", "fragment"), [
    ("\n" + "".join(f"      a{k}: &a{k} [" + ", ".join([f"*a{k - 1}" if k else "x"] * 10) + "]\n"
                    for k in range(9)), 18,
     "more than 10000 values once aliases are expanded (an alias bomb?)"),
    ("&a [1, *a]", 17, "a value that contains itself (a recursive alias)"),
])
def test_visual_cannot_hold_an_alias_bomb(tmp_path: Path, visual: str, line: int,
                                          fragment: str) -> None:
    """visual is copied to meta.json: a billion-laughs bomb took 7.7 GB there."""
    text = VALID.replace("    mass: 2.0", f"    mass: 2.0\n    visual: {visual}".rstrip())
    with bounded_time(200):
        expect_error(write(tmp_path, text), line, "planar_bodies[1].visual", fragment)
    shared = VALID.replace("    mass: 2.0", "    mass: 2.0\n    visual: [&c {r: 1}, *c]")
    assert load_mechanism(write(tmp_path, shared, "ok.yaml")).bodies[1].visual == [{"r": 1}] * 2


@pytest.mark.parametrize(("gravity", "fragment"), [
    ("[0, -1e300]", "'1e300' is larger than 1e+15 in magnitude"),
    ("[0, .nan]", "nan is not a finite number"),
    ("[0, -1e15*1e15*1e15*1e15*1e15*1e15*1e15]", "more than 100 digits"),
])
def test_gravity_keeps_its_value_or_is_refused(tmp_path: Path, gravity: str,
                                               fragment: str) -> None:
    """-1e300 became zero gravity in the generated C."""
    expect_error(write(tmp_path, VALID + f"gravity: {gravity}\n"), 17, "gravity[1]", fragment)
