"""The string type of every free string a request body carries: refused (HTTP 422) when it holds
a NUL character or a lone surrogate, which no name, problem or note of ours contains."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, StrictStr

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _plain(value: str) -> str:
    if _UNSTORABLE.search(value):
        raise ValueError("holds a NUL character or a lone surrogate")
    return value


#: A strict string without NUL or lone surrogates.
Text = Annotated[StrictStr, AfterValidator(_plain)]
