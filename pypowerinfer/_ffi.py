"""The raw native library: cffi reads the one public header and opens libpowerinfer.

Layers (as argon2-cffi): this module (raw lib + `check`) -> thin wrappers in model.py ->
the public API in llama.py. Nothing else calls `lib` directly.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import cffi

_PKG = Path(__file__).resolve().parent
_LIB_NAMES = ["libpowerinfer.so", "libpowerinfer.dylib", "powerinfer.dll"]


class PowerInferError(RuntimeError):
    """A native call failed; the message is the library's own."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class UnsupportedError(PowerInferError, NotImplementedError):
    """The file is valid but uses a type or architecture this runtime does not run."""


def _header_text() -> str:
    for candidate in (_PKG / "powerinfer.h", _PKG.parent / "native" / "include" / "powerinfer.h"):
        if candidate.is_file():
            return candidate.read_text()
    raise ImportError("pypowerinfer: powerinfer.h not found beside the package or in native/include")


def _cdef(header: str) -> str:
    match = re.search(r"/\* CDEF-BEGIN \*/(.*)/\* CDEF-END \*/", header, re.S)
    if not match:
        raise ImportError("pypowerinfer: powerinfer.h has no CDEF-BEGIN/CDEF-END section")
    return match.group(1).replace("PI_API ", "")


def _library_path() -> str:
    override = os.environ.get("PI_LIBRARY")
    if override:
        return override
    for name in _LIB_NAMES:
        if (_PKG / name).is_file():
            return str(_PKG / name)
    raise ImportError(
        "pypowerinfer: the native library is not built. Install the package with "
        "`pip install .` (or point PI_LIBRARY at a libpowerinfer built with CMake)."
    )


ffi = cffi.FFI()
ffi.cdef(_cdef(_header_text()))
lib = ffi.dlopen(_library_path())


def last_error(status: int) -> str:
    message = ffi.string(lib.pi_last_error()).decode("utf-8", "replace")
    return message or ffi.string(lib.pi_status_str(status)).decode()


def check(status: int) -> None:
    """Raise the Python exception that matches a native status code."""
    if status == lib.PI_OK:
        return
    message = last_error(status)
    if status == lib.PI_ERR_UNSUPPORTED:
        raise UnsupportedError(status, message)
    if status == lib.PI_ERR_NOMEM:
        raise MemoryError(message)
    if status == lib.PI_ERR_IO:
        raise OSError(message)
    if status in (lib.PI_ERR_FORMAT, lib.PI_ERR_ARG, lib.PI_ERR_CONTEXT):
        raise ValueError(message)
    raise PowerInferError(status, message)


__all__ = ["ffi", "lib", "check", "PowerInferError", "UnsupportedError"]
