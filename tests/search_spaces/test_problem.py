"""Problem schemas: validation errors name the bad field in one line; problem keys are canonical."""

import pytest

from search_spaces import Field, FieldKind, Problem, ProblemError, ProblemSchema, problem_key
from search_spaces.kernels.matmul import SPEC as MATMUL
from search_spaces.kernels.rmsnorm import SPEC as RMSNORM

GOOD: Problem = {"M": 64, "N": 32, "K": 16, "dtype": "float16"}


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"M": 64, "N": 32, "dtype": "float16"}, "problem lacks 'K'; give M=<int>,N=<int>,K=<int>"),
        ({**GOOD, "K": 0}, "K=0 must be a positive integer"),
        ({**GOOD, "M": -4}, "M=-4 must be a positive integer"),
        ({**GOOD, "N": 1.5}, "N=1.5 must be a positive integer"),
        ({**GOOD, "N": "1.5"}, "N=1.5 must be a positive integer"),
        ({**GOOD, "N": "many"}, "N=many must be a positive integer"),
        ({**GOOD, "N": True}, "N=True must be a positive integer"),
        ({**GOOD, "dtype": "float64"}, "dtype=float64 is not supported; choose one of float16"),
        ({**GOOD, "batch": 2}, "unknown problem field 'batch'; fields are M, N, K, dtype"),
    ],
)
def test_matmul_problem_errors(raw: dict[str, object], words: str) -> None:
    with pytest.raises(ProblemError) as err:
        MATMUL.validate_problem(raw)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_valid_problems_are_typed() -> None:
    assert MATMUL.validate_problem({"M": "64", "N": 32, "K": " 16 ", "dtype": "float16"}) == GOOD
    assert MATMUL.validate_problem(MATMUL.example) == MATMUL.example
    assert RMSNORM.validate_problem(RMSNORM.example) == RMSNORM.example


def test_parse_cli_text() -> None:
    assert MATMUL.schema.parse("M=64, N=32,K=16,dtype=float16") == GOOD
    with pytest.raises(ProblemError, match="'M64' is not NAME=VALUE"):
        MATMUL.schema.parse("M64,N=32,K=16,dtype=float16")
    with pytest.raises(ProblemError, match="lacks 'N'"):
        RMSNORM.schema.parse("M=4,dtype=bfloat16")


def test_problem_key_is_canonical() -> None:
    a = MATMUL.schema.parse("dtype=float16,K=16,N=32,M=64")
    b = MATMUL.validate_problem({"K": 16, "M": "64", "dtype": "float16", "N": 32})
    assert problem_key(a) == problem_key(b) == '{"K":16,"M":64,"N":32,"dtype":"float16"}'
    assert problem_key({**a, "K": 17}) != problem_key(a)


def test_bool_choice_and_default_fields() -> None:
    schema = ProblemSchema(
        (
            Field("S"),
            Field("causal", FieldKind.BOOL, default=False),
            Field("layout", FieldKind.CHOICE, choices=("bshd", "bhsd")),
        )
    )
    assert schema.parse("S=8,layout=bhsd") == {"S": 8, "causal": False, "layout": "bhsd"}
    assert schema.parse("S=8,causal=yes,layout=bshd")["causal"] is True
    with pytest.raises(ProblemError, match="causal=maybe must be true or false"):
        schema.parse("S=8,causal=maybe,layout=bshd")
    with pytest.raises(ProblemError, match="layout=nhd is not supported; choose one of bshd, bhsd"):
        schema.parse("S=8,layout=nhd")
    assert schema.usage() == "S=<int>,causal=true|false,layout=bshd|bhsd"


def test_flops_and_bytes() -> None:
    assert MATMUL.flops(GOOD) == 2 * 64 * 32 * 16
    assert MATMUL.bytes_moved(GOOD) == (64 * 16 + 16 * 32 + 64 * 32) * 2
    assert MATMUL.bytes_moved({**GOOD, "dtype": "float32"}) == (64 * 16 + 16 * 32 + 64 * 32) * 4
    norm: Problem = {"M": 8, "N": 100, "dtype": "bfloat16"}
    assert RMSNORM.flops(norm) == 4 * 8 * 100
    assert RMSNORM.bytes_moved(norm) == (2 * 8 * 100 + 100) * 2


def test_tolerances() -> None:
    assert MATMUL.tolerance(GOOD) == 1e-2
    assert MATMUL.tolerance({**GOOD, "dtype": "bfloat16"}) == 2e-2
    assert MATMUL.tolerance({**GOOD, "dtype": "float32"}) == 4e-3
    assert RMSNORM.tolerance({"M": 1, "N": 1, "dtype": "float32"}) == 1e-3


@pytest.mark.parametrize(
    "text", ["M=64,M=128,N=32,K=16,dtype=float16", "M=64,N=32,K=16,dtype=float16, M =64"]
)
def test_a_field_named_twice_is_refused(text: str) -> None:
    with pytest.raises(ProblemError, match=r"problem names 'M' twice .*give each field once"):
        MATMUL.schema.parse(text)
