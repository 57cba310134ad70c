# the optional compiled row kernel (_rowcopy.c); see row_kernel.py
from typing import Any

def copy_rows(
    src: Any,
    dst: Any,
    begin: Any,
    end: Any,
    pos: Any,
    frame: int,
    row: int,
    check: int,
    screen: bytes | None,
    /,
) -> list[int] | None: ...
