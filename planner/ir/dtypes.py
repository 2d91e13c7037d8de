"""Element types of tiles, views and memories."""

from __future__ import annotations

from enum import Enum

import numpy as np


class DType(Enum):
    """An element type; ``value`` is its IR spelling."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    I32 = "i32"
    BOOL = "i1"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.F16, DType.BF16)

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype the reference interpreter computes in (bf16 widens to f32)."""
        return np.dtype(_NUMPY[self])

    @classmethod
    def parse(cls, text: str) -> DType:
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(d.value for d in cls)
            raise ValueError(f"unknown element type {text!r} (known: {known})") from None

    def __str__(self) -> str:
        return self.value


_ITEMSIZE = {DType.F32: 4, DType.F16: 2, DType.BF16: 2, DType.I32: 4, DType.BOOL: 1}
_NUMPY = {DType.F32: "float32", DType.F16: "float16", DType.BF16: "float32",
          DType.I32: "int32", DType.BOOL: "bool"}

f32, f16, bf16, i32, i1 = DType.F32, DType.F16, DType.BF16, DType.I32, DType.BOOL
