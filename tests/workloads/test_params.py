from __future__ import annotations

import math

import numpy as np
import pytest

from workloads.errors import PlacementError
from workloads.params import Param, param_type


@pytest.mark.parametrize(("param", "value", "message"), [
    (Param("n", "int", 1, minimum=1), 0, "n must be an int >= 1, got 0"),
    (Param("n", "int", 1, minimum=1), True, "n must be an int >= 1, got True"),
    (Param("n", "int", 1, minimum=1), 2.0, "n must be an int >= 1, got 2.0"),
    (Param("n", "int", 1, minimum=1), "5", "n must be an int >= 1, got '5'"),
    (Param("x", "float", 1.0, minimum=0), 0, "x must be a finite number > 0, got 0"),
    (Param("x", "float", 1.0, minimum=0), math.nan, "x must be a finite number > 0, got nan"),
    (Param("x", "float", 1.0), math.inf, "x must be a finite number, got inf"),
    (Param("x", "float", 1.0), np.True_, "x must be a finite number, got np.True_"),
    (Param("x", "float", None, minimum=0, optional=True), -1.0,
     "x must be a finite number > 0 or None, got -1.0"),
    (Param("t", "str", "a", choices=("a", "b")), "c", "t must be one of a, b, got 'c'"),
    (Param("s", "str", "a"), None, "s must be a string, got None"),
    (Param("b", "bool", False), 1, "b must be true or false, got 1"),
    (Param("seed", "seed", None), -1,
     "seed must be an integer >= 0, a numpy.random.Generator or None, got -1"),
    (Param("seed", "seed", None), 1.5,
     "seed must be an integer >= 0, a numpy.random.Generator or None, got 1.5"),
])
def test_an_invalid_value_is_one_line(param: Param, value: object, message: str) -> None:
    with pytest.raises(PlacementError) as err:
        param.check("p", value)
    assert str(err.value) == f"policy 'p': {message}"


def test_valid_values_come_back_as_declared() -> None:
    assert type(Param("n", "int", 1).check("p", np.int64(3))) is int
    assert type(Param("s", "seed", None).check("p", np.uint8(3))) is int
    rng = np.random.default_rng(0)
    assert Param("s", "seed", None).check("p", rng) is rng
    assert Param("s", "seed", None).check("p", None) is None
    given = np.float64(0.5)
    assert Param("x", "float", 1.0).check("p", given) is given  # a number stays as given
    assert Param("x", "float", 1.0).check("p", 2) == 2
    assert Param("t", "str", "a", choices=("a", "b"), optional=True).check("p", None) is None


def test_parse_reads_text_then_checks_it() -> None:
    p = Param("n", "int", 1, minimum=1)
    assert p.parse("pol", "8") == 8
    with pytest.raises(PlacementError, match=r"^policy 'pol': n must be an int >= 1, got "
                                             r"'x'$"):
        p.parse("pol", "x")
    with pytest.raises(PlacementError, match=r"^policy 'pol': n must be an int >= 1, got 0$"):
        p.parse("pol", "0")
    assert Param("b", "bool", False).parse("pol", "True") is True


def test_the_type_is_a_pydantic_type() -> None:
    from pydantic import TypeAdapter, ValidationError

    adapter = TypeAdapter(param_type("float", minimum=0, optional=True))
    assert adapter.validate_python(None) is None
    with pytest.raises(ValidationError):
        adapter.validate_python(math.nan)
