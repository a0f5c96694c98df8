"""Types of the C kernels in _kernel.c (see its docstring for what each decides and why)."""

from typing import Any

import numpy as np
import numpy.typing as npt

_U64 = npt.NDArray[np.uint64]
_I64 = npt.NDArray[np.int64]

def quick_log(m: float, /) -> float: ...
def invert(
    values: _I64,
    inv: float,
    offset: float,
    margin: float,
    small: int,
    two_sided: bool,
    /,
) -> list[int]: ...
def bexp(
    words: _U64,
    x: npt.NDArray[np.float64],
    offset: float,
    delta: float,
    small: int,
    accept: npt.NDArray[np.bool_],
    /,
) -> list[int]: ...
def gaussian_log(
    proposals: _I64,
    words: _I64,
    mu: float,
    inv_sd: float,
    offset: float,
    delta: float,
    small: int,
    /,
) -> tuple[int, list[tuple[int, int]]]: ...
def gaussian_table(
    proposals: _I64,
    words: _I64,
    lo: npt.NDArray[Any],
    width: npt.NDArray[Any],
    /,
) -> tuple[int, list[tuple[int, int]]]: ...
