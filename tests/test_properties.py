"""Property-based tests (Hypothesis) of what reads user input: the option types, the YAML
loader and its YAML 1.2 numbers. Whatever the text, the answer is a value within its
documented range or one located error, never another exception."""

from __future__ import annotations

import math
from pathlib import Path

import click
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mbgen.cli.conventions import FINITE, NON_NEGATIVE, POSITIVE, Real
from mbgen.errors import MbgenError
from mbgen.model.parser import load_mechanism
from mbgen.model.yaml_nodes import read_document

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

number_like = st.one_of(
    st.floats().map(repr), st.integers().map(str), st.text(max_size=12),
    st.sampled_from(["nan", "-inf", "1e999", "²", "١٢", "1_0", "0x1", " 3 ", "−1", ""]),
    st.text(alphabet="0123456789", min_size=300, max_size=5000))


@SETTINGS
@given(text=number_like, kind=st.sampled_from([FINITE, NON_NEGATIVE, POSITIVE,
                                                Real(1.0, high=10.0)]))
def test_an_option_value_is_in_range_or_a_usage_error(text: str, kind: Real) -> None:
    try:
        value = kind.convert(text, None, None)
    except click.BadParameter:
        return
    assert math.isfinite(value)
    assert kind.low is None or value > kind.low or (value == kind.low and not kind.low_open)
    assert kind.high is None or value <= kind.high


@SETTINGS
@given(value=st.integers(min_value=-10**30, max_value=10**30), zeros=st.integers(0, 3))
def test_yaml_12_integers_are_decimal(value: int, zeros: int) -> None:
    """Leading zeros do not make an octal number (YAML 1.1 read 010 as 8)."""
    text = ("-" if value < 0 else "") + "0" * zeros + str(abs(value))
    node = read_document(f"a: {text}\n", "f.yaml").mapping({"a"})["a"]
    assert node.scalar() == value


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                    st.text(max_size=20),
                    st.sampled_from(["0", "x", "L", "fixed", "1/0", "sqrt(-1)", "1e999",
                                     "__import__('os')", "*/", '"""', "x1", "pi"]))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["points", "planar_bodies", "parameters", "x", "y",
                                     "fixed", "points", "mass", "length", "name", "sensors",
                                     "type", "body", "gravity", "other"]), inner, max_size=5)),
    max_leaves=30)


@SETTINGS
@given(document=documents)
def test_any_document_loads_or_is_one_located_error(tmp_path: Path, document: object) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    try:
        load_mechanism(path)
    except MbgenError as exc:
        assert str(exc).startswith(str(path)), exc

