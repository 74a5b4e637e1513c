"""The C library and the Python extension in one process, each with its own
logger: the C library's events go to its `grantid_set_log_callback`, the
extension's to `logging.getLogger("grantid")`, and neither sees the other's
(each library carries its own copy of the core and of the Rust `log`
facade; ffi-c/README.md, "One logger per process").

The C library is found through GRANTID_FFI_LIB (scripts/test.d/50-python.sh
builds it and sets it); without it the test is skipped."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path
from typing import List, Tuple

import pytest

import grantid

GRANTID_OK = 0
GRANTID_LOG_DEBUG = 4

LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)


class OptionsHead(ctypes.Structure):
    """The first two fields of grantid_generator_options (the rest are set
    by grantid_generator_options_init and left as they are)."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("namespace_", ctypes.c_char_p)]


def load_c_library() -> ctypes.CDLL:
    path = os.environ.get("GRANTID_FFI_LIB")
    if not path:
        pytest.skip("GRANTID_FFI_LIB is not set (scripts/test.d/50-python.sh sets it)")
    lib = ctypes.CDLL(path)
    lib.grantid_set_log_callback.argtypes = [LOG_FN, ctypes.c_int32, ctypes.c_void_p]
    lib.grantid_set_log_callback.restype = ctypes.c_uint32
    lib.grantid_generator_options_init.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.grantid_generator_options_init.restype = ctypes.c_uint32
    lib.grantid_generator_new_url.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_void_p),
    ]
    lib.grantid_generator_new_url.restype = ctypes.c_uint32
    lib.grantid_next_id.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
    lib.grantid_next_id.restype = ctypes.c_uint32
    lib.grantid_generator_close.argtypes = [ctypes.c_void_p]
    lib.grantid_generator_close.restype = ctypes.c_uint32
    lib.grantid_generator_free.argtypes = [ctypes.c_void_p]
    lib.grantid_generator_free.restype = None
    return lib


def c_generator_round(lib: ctypes.CDLL, url: str, namespace: str) -> int:
    """Starts a C generator on `url`, issues one ID, closes and frees it."""
    # Room for this version's options and more: fields past the library's
    # struct are zeroed by _init (a newer caller's struct).
    buf = ctypes.create_string_buffer(1024)
    assert lib.grantid_generator_options_init(buf, len(buf)) == GRANTID_OK
    head = OptionsHead.from_buffer(buf)
    ns = ctypes.c_char_p(namespace.encode())
    head.namespace_ = ns
    gen = ctypes.c_void_p()
    status = lib.grantid_generator_new_url(buf, url.encode(), ctypes.byref(gen))
    assert status == GRANTID_OK, status
    try:
        out = ctypes.c_uint64()
        assert lib.grantid_next_id(gen, ctypes.byref(out)) == GRANTID_OK
        assert lib.grantid_generator_close(gen) == GRANTID_OK
        return out.value
    finally:
        lib.grantid_generator_free(gen)


def test_c_and_python_loggers_in_one_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lib = load_c_library()
    c_events: List[Tuple[int, str, str, str]] = []
    lock = threading.Lock()

    def on_log(level: int, target: bytes, message: bytes, _user: object) -> None:
        with lock:
            c_events.append(
                (level, target.decode(), message.decode(), threading.current_thread().name)
            )

    callback = LOG_FN(on_log)  # kept alive until delivery stops below
    assert lib.grantid_set_log_callback(callback, GRANTID_LOG_DEBUG, None) == GRANTID_OK
    try:
        with caplog.at_level(logging.DEBUG, logger="grantid"):
            c_id = c_generator_round(lib, f"file:{tmp_path / 'c.json'}", "from-c")
            with grantid.Generator(grantid.MemoryAuthority(), namespace="from-python") as g:
                py_id = g.next_id()
            # Both at once: the C generator runs while the Python one is open.
            with grantid.Generator(grantid.MemoryAuthority(), namespace="from-python-2") as g:
                c_generator_round(lib, f"file:{tmp_path / 'c2.json'}", "from-c-2")
                g.next_id()
    finally:
        assert lib.grantid_set_log_callback(LOG_FN(), GRANTID_LOG_DEBUG, None) == GRANTID_OK
    assert c_id > 0 and py_id > 0

    c_messages = [m for (_, target, m, _) in c_events if target == "grantid"]
    py_messages = [r.getMessage() for r in caplog.records if r.name == "grantid"]
    for ns in ("from-c", "from-c-2"):
        grant = [m for m in c_messages if m.startswith("event=grant ") and f"namespace={ns} " in m]
        assert grant, c_messages
        assert any(m.startswith("event=closed ") and f"namespace={ns}" in m for m in c_messages)
    assert [lvl for (lvl, _, m, _) in c_events if m.startswith("event=grant ")][0] == GRANTID_LOG_DEBUG
    for ns in ("from-python", "from-python-2"):
        assert any(m.startswith("event=grant ") and f"namespace={ns} " in m for m in py_messages)
        assert any(m.startswith("event=closed ") and f"namespace={ns}" in m for m in py_messages)
    # Each logger has its own library's events only.
    assert not any("from-python" in m for m in c_messages), c_messages
    assert not any("from-c" in m for m in py_messages), py_messages
    # The extension's bridge is still the one in place.
    assert grantid.log_bridge_installed()

    # After delivery stopped, the C library logs nothing more to it.
    before = len(c_events)
    c_generator_round(lib, f"file:{tmp_path / 'c3.json'}", "from-c-3")
    assert len(c_events) == before
