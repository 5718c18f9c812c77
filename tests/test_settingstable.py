"""The settings table: one declaration gives a key's default, parsing, bounds and errors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuey.errors import ConfigurationError
from queuey.settingstable import Key, Table, integer, number, setting

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Sample:
    port: int = setting("sample.port", "9042", minimum=1, maximum=65535, help="a port")
    timeout: float = setting("sample.timeout", "2", above=0)
    hosts: tuple[str, ...] = setting("sample.hosts", "a, b")
    secure: bool = setting("sample.secure", "false")
    name: str = setting("sample.name", required=True)
    secret: str | None = setting("sample.secret")
    extra: str = "not a key"


SAMPLE = Table(Sample, env_prefix="")


def test_defaults_fill_absent_and_empty_keys():
    values = SAMPLE.read({"sample.name": "x", "sample.port": " "})
    assert values == {
        "port": 9042,
        "timeout": 2.0,
        "hosts": ("a", "b"),
        "secure": False,
        "name": "x",
        "secret": None,
    }
    assert SAMPLE.build(values).extra == "not a key"


def test_the_table_knows_its_keys_and_defaults():
    assert SAMPLE.names() == (
        "sample.port",
        "sample.timeout",
        "sample.hosts",
        "sample.secure",
        "sample.name",
        "sample.secret",
    )
    assert SAMPLE.defaults()["sample.port"] == "9042"
    assert "sample.secret" not in SAMPLE.defaults()
    assert SAMPLE.by_name["sample.port"].help == "a port"


def test_the_environment_overrides_the_mapping():
    values = SAMPLE.read({"sample.name": "x"}, {"SAMPLE_PORT": "1", "SAMPLE_NAME": "y"})
    assert (values["port"], values["name"]) == (1, "y")


def test_without_a_prefix_the_environment_is_not_read():
    plain = Table(Sample)
    assert plain.read({"sample.name": "x"}, {"SAMPLE_PORT": "1"})["port"] == 9042


def test_any_case_lookup():
    table = Table(Sample, any_case=True)
    assert table.read({"SAMPLE.NAME": "x", "Sample.Port": "7"})["port"] == 7


def test_unknown_keys_are_left_alone():
    assert SAMPLE.read({"sample.name": "x", "sample.nothing": "?"})["name"] == "x"


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("sample.port", "ninety", "invalid value 'ninety': not an integer"),
        ("sample.port", "1.5", "not an integer"),
        ("sample.port", "0", "must be between 1 and 65535, got 0"),
        ("sample.timeout", "0", "must be above 0, got 0.0"),
        ("sample.timeout", "inf", "must be a finite number"),
        ("sample.timeout", "nan", "must be a finite number"),
        ("sample.secure", "perhaps", "not a boolean"),
        ("sample.name", "", "is required"),
    ],
)
def test_a_bad_value_names_the_key(key, value, words):
    with pytest.raises(ConfigurationError) as info:
        SAMPLE.read({"sample.name": "x", key: value})
    assert info.value.key == key
    assert words in str(info.value)


def test_a_field_of_a_type_without_a_parser_must_name_one():
    @dataclass(frozen=True)
    class Odd:
        when: complex = setting("odd.when")

    with pytest.raises(TypeError, match="parse="):
        Table(Odd)


@given(st.integers())
def test_integer_bounds_hold_for_any_integer(value):
    key = Key("k", integer, minimum=-10, maximum=10)
    if -10 <= value <= 10:
        assert key.read(str(value)) == value
    else:
        with pytest.raises(ConfigurationError, match="must be between -10 and 10"):
            key.read(str(value))


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_number_bounds_hold_for_any_float(value):
    key = Key("k", number, minimum=0.5)
    if value >= 0.5 and value != float("inf"):
        assert key.read(repr(value)) == value
    else:
        with pytest.raises(ConfigurationError):
            key.read(repr(value))


@given(st.text())
def test_any_text_is_read_or_refused_naming_the_key(raw):
    try:
        SAMPLE.read({"sample.name": "x", "sample.port": raw})
    except ConfigurationError as exc:
        assert exc.key == "sample.port"
