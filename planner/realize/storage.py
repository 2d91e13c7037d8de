"""How a buffer's bytes are laid out physically: alignment and the stride between versions.

A buffer that keeps several iteration-local versions (S18) stores them
:data:`VERSION_ALIGN` bytes apart, so each version starts on a cache line (CPU) or a
16-byte threadgroup boundary (Metal) whatever the element type, and on the resource's
alignment where that is coarser (:func:`version_granule`; a ping-pong loop carry:
its resource's alignment apart, see :func:`version_stride_elements`); a buffer's footprint in a
resource is then rounded up to that resource's alignment.  The cost model counts these
bytes and the loop program allocates them, both through this module.
"""

from __future__ import annotations

__all__ = ["VERSION_ALIGN", "align", "version_bytes", "version_granule",
           "version_stride_elements"]

VERSION_ALIGN = 64


def align(nbytes: int, alignment: int) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment`` (at least 1)."""
    a = max(1, alignment)
    return -(-nbytes // a) * a


def version_granule(alignment: int) -> int:
    """Bytes a version stride is a multiple of in a resource of ``alignment``: each
    version starts on :data:`VERSION_ALIGN` and on the resource's own granule (the cost
    model rounds every version up to the resource's alignment)."""
    return max(VERSION_ALIGN, alignment)


def version_bytes(nbytes: int, max_versions: int) -> int:
    """Bytes of one version of a buffer that may keep ``max_versions`` versions."""
    return align(nbytes, VERSION_ALIGN) if max_versions > 1 else nbytes


def version_stride_elements(itemsize: int, granule: int = VERSION_ALIGN) -> int:
    """The version stride's granule in elements of ``itemsize`` bytes.

    A loop carry that ping-pongs keeps its old value and the value yielded into it: two
    values, each its own buffer in the cost model rounded to its resource's alignment,
    so its ``granule`` is that alignment rather than :data:`VERSION_ALIGN`."""
    return max(1, granule // itemsize)
