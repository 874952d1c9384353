#!/usr/bin/env python3
"""A newer glslang and SPIRV-Tools than Debian 12 packages (for GL_NV_cooperative_matrix2).

slang's libslang-glslang, from the slangpy wheel on PyPI, kept in
~/.cache/kiln/slang (KILN_SLANG_GLSLANG names another file). kiln's Vulkan
codegen dlopens the same file (codegen/spirv/glslang_next.cc).
`python3 scripts/glslang_next.py --fetch` puts it there (scripts/setup.sh runs it).
"""
import argparse
import ctypes
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

WHEEL = "slangpy==0.43.1"


CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kiln", "slang")


def installed_library():
    env = os.environ.get("KILN_SLANG_GLSLANG")
    if env:
        return env
    found = glob.glob(os.path.join(CACHE, "slangpy", "libslang-glslang-*.so"))
    return found[0] if found else None


def find_library():
    """The installed library, else fetched from PyPI into the cache (what scripts/setup.sh runs)."""
    found = installed_library()
    if found:
        return found
    cache = CACHE
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, WHEEL], check=True)
        wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if os.path.basename(name).startswith("libslang-glslang-"):
                    z.extract(name, cache)
    return glob.glob(os.path.join(cache, "slangpy", "libslang-glslang-*.so"))[0]


OutputFunc = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


class Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int)]


class Request(ctypes.Structure):  # slang-glslang's glslang_CompileRequest_1_2
    _fields_ = [("sizeInBytes", ctypes.c_size_t), ("sourcePath", ctypes.c_char_p),
                ("inputBegin", ctypes.c_void_p), ("inputEnd", ctypes.c_void_p),
                ("diagnosticFunc", OutputFunc), ("diagnosticUserData", ctypes.c_void_p),
                ("outputFunc", OutputFunc), ("outputUserData", ctypes.c_void_p),
                ("slangStage", ctypes.c_int), ("action", ctypes.c_uint),
                ("optimizationLevel", ctypes.c_uint), ("debugInfoType", ctypes.c_uint),
                ("spirvTargetName", ctypes.c_char_p), ("spirvVersion", Version),
                ("entryPointName", ctypes.c_char_p)]


def compile_variant(lib, text, name):
    source = ctypes.create_string_buffer(text.encode(), len(text))
    out, diag = bytearray(), bytearray()
    on_out = OutputFunc(lambda p, n, u: out.extend(ctypes.string_at(p, n)))
    on_diag = OutputFunc(lambda p, n, u: diag.extend(ctypes.string_at(p, n)))
    r = Request()
    r.sizeInBytes = ctypes.sizeof(Request)
    r.sourcePath = name.encode()
    r.inputBegin = ctypes.addressof(source)
    r.inputEnd = ctypes.addressof(source) + len(text)
    r.diagnosticFunc, r.outputFunc = on_diag, on_out
    r.slangStage = 6  # compute
    r.optimizationLevel = 2
    r.spirvVersion = Version(1, 6, 0)  # GL_NV_cooperative_matrix2 needs SPIR-V 1.6 (Vulkan 1.3)
    r.entryPointName = b"main"
    if lib.glslang_compile_1_2(ctypes.byref(r)) != 0 or not out:
        raise SystemExit(f"{name}: glslang failed:\n{diag.decode(errors='replace')}")
    words = (ctypes.c_uint32 * (len(out) // 4)).from_buffer_copy(out)
    lib.glslang_validateSPIRV.restype = ctypes.c_bool
    if not lib.glslang_validateSPIRV(words, len(words)):
        raise SystemExit(f"{name}: the SPIR-V does not validate")
    return list(words)



if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fetch", action="store_true", help="fetch the library into the cache where it is missing")
    if parser.parse_args().fetch:
        print(f"libslang-glslang: {find_library()}")
