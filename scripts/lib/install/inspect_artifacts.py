"""Inspects every artifact of a dist/ folder (scripts/package.sh).

Usage: python inspect_artifacts.py DIST [AUDITWHEEL] [LLVM_BIN]

For each wheel, npm platform package, C tarball and CLI tarball, the ELF
files it ships are read with readelf:

1. the machine is the one its name says (x86_64 or aarch64);
2. no debug info;
3. a glibc build asks for no symbol version above glibc 2.17 (manylinux2014's
   floor);
4. a musl shared library needs libc.musl-ARCH.so.1 and no glibc; a musl CLI
   is static (no interpreter, no shared library);
5. a wheel's tag is what `auditwheel show` finds (AUDITWHEEL, when given);
6. every artifact of the matrix is there: a wheel, an npm platform package,
   a C tarball and a CLI tarball for each of the four Linux targets.

For each macOS wheel and npm platform package (LLVM_BIN: the folder of
llvm-objdump and llvm-nm, rustup's llvm-tools), the Mach-O file it ships
is read as delocate and dyld would:

7. a Mach-O dynamic library for macOS, of the architecture its name says,
   for a macOS no newer than its tag (wheels) or package.sh's floor (npm:
   10.14 x86_64, 11.0 arm64), with no debug info, and signed (arm64 runs
   signed code only);
8. it exports its entry point (`PyInit__grantid`, `napi_register_module_v1`);
9. every library it loads is part of macOS (/usr/lib/ or
   /System/Library/Frameworks/), and every name it imports is bound to one
   of those libraries (dyld refuses a name bound to none), except the
   host's own API (Python's `Py*`, Node's `napi_*` and `node_api_*`), which
   the interpreter provides. Which framework really exports a name, and
   from which macOS on, is the stubs' rule (scripts/lib/macos/) and the
   floor's, not checked here;
10. a wheel and an npm platform package for each of x86_64 and arm64.

Prints one Markdown row per artifact (name, platform, size, glibc floor,
static or macOS floor) and exits non-zero naming every check that failed.
"""

import json
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

dist = Path(sys.argv[1])
auditwheel = sys.argv[2] if len(sys.argv) > 2 else ""
llvm_bin = Path(sys.argv[3]) if len(sys.argv) > 3 else None
failures = []
rows = []

ARCH = {"x86_64": "X86-64", "aarch64": "AArch64"}


def readelf(path, *flags):
    return subprocess.run(["readelf", *flags, str(path)], capture_output=True, text=True, check=True).stdout


def elf_facts(path):
    header = readelf(path, "-h")
    machine = re.search(r"Machine:\s+(.*)", header).group(1)
    sections = readelf(path, "-S", "-W")
    dynamic = readelf(path, "-d")
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", dynamic)
    program = readelf(path, "-l", "-W")
    versions = readelf(path, "-V", "-W")
    glibc = sorted(
        {tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)", versions)}
    )
    return {
        "machine": machine,
        "debug": ".debug_info" in sections,
        "needed": needed,
        "interp": "INTERP" in program,
        "glibc": glibc[-1] if glibc else None,
    }


def check(name, arch, abi, path, static=False):
    facts = elf_facts(path)
    problems = []
    if ARCH[arch] not in facts["machine"]:
        problems.append(f"machine is {facts['machine']}, not {arch}")
    if facts["debug"]:
        problems.append("carries debug info")
    if abi == "gnu":
        if facts["glibc"] and facts["glibc"] > (2, 17):
            problems.append(f"needs glibc {'.'.join(map(str, facts['glibc']))}, above 2.17")
        floor = "glibc " + ".".join(map(str, facts["glibc"])) if facts["glibc"] else "no glibc symbol versions"
    elif static:
        if facts["interp"] or facts["needed"]:
            problems.append(f"not static: interpreter {facts['interp']}, needs {facts['needed']}")
        floor = "static"
    else:
        want = f"libc.musl-{arch}.so.1"
        if want not in facts["needed"]:
            problems.append(f"needs {facts['needed']}, not {want}")
        if facts["glibc"]:
            problems.append("asks for glibc symbol versions")
        floor = want
    for p in problems:
        failures.append(f"{name}: {path.name}: {p}")
    return floor


def size(path):
    return f"{path.stat().st_size / 1e6:.1f} MB"


def platform_of(name):
    m = re.search(r"(x86_64|aarch64|x64|arm64)[-_]?(linux)?[-_]?(gnu|musl)?", name)
    arch = {"x64": "x86_64", "arm64": "aarch64"}.get(m.group(1), m.group(1))
    abi = m.group(3) or ("musl" if "musllinux" in name else "gnu")
    return arch, abi


# ---- macOS ------------------------------------------------------------------
MACHO_ARCH = {"x86_64": "X86_64", "arm64": "ARM64"}
# package.sh's macos_floor, which names the wheels' tags too.
NPM_FLOOR = {"x86_64": (10, 14), "arm64": (11, 0)}
SYSTEM = ("/usr/lib/", "/System/Library/Frameworks/")
IMPORTS = "scripts/lib/macos/imports.txt"


def llvm(tool, *args):
    return subprocess.run([str(llvm_bin / tool), *args], capture_output=True, text=True, check=True).stdout


def check_macho(name, arch, floor, entry, host_api, path):
    """Checks 7-9; returns the floor the file asks for."""
    headers = llvm("llvm-objdump", "--macho", "--private-headers", str(path))
    problems = []
    kind = re.search(r"MH_MAGIC_64\s+(\S+)\s+\S+\s+\S+\s+(\S+)", headers)
    if not kind or kind.group(1) != MACHO_ARCH[arch] or kind.group(2) not in ("DYLIB", "BUNDLE"):
        problems.append(f"not a {arch} Mach-O library: {kind.group(0) if kind else 'no 64-bit Mach-O header'}")
    if arch == "arm64" and "cmd LC_CODE_SIGNATURE" not in headers:
        problems.append("unsigned: macOS on arm64 loads only signed code (an ad hoc signature will do)")
    # (LC_BUILD_VERSION's platform and minos; for a floor before macOS
    # 10.14, LC_VERSION_MIN_MACOSX)
    minos = re.search(
        r"cmd LC_BUILD_VERSION\n.*?\n\s+platform macos\n.*?\n\s+minos ([\d.]+)"
        r"|cmd LC_VERSION_MIN_MACOSX\n.*?\n\s+version ([\d.]+)",
        headers,
    )
    asks = tuple(int(x) for x in (minos.group(1) or minos.group(2)).split(".")) if minos else None
    if asks is None or asks > floor:
        problems.append(f"needs macOS {asks}, above {floor} (or no macOS version at all)")
    loads = re.findall(
        r"cmd LC_(?:LOAD|LOAD_WEAK|REEXPORT|LOAD_UPWARD|LAZY_LOAD)_DYLIB\n.*?\n\s+name (\S+)", headers
    )
    if not loads:
        problems.append("loads no library")
    problems += [f"loads {lib}, not part of macOS" for lib in loads if not lib.startswith(SYSTEM)]
    sections = llvm("llvm-objdump", "--macho", "--section-headers", str(path))
    if "__debug_info" in sections or "__DWARF" in sections:
        problems.append("carries debug info")
    exports = llvm("llvm-nm", "--extern-only", "--defined-only", "--just-symbol-name", str(path)).split()
    if "_" + entry not in exports:
        problems.append(f"does not export {entry}")
    # llvm-nm names a bound import's library by its short name:
    # /usr/lib/libSystem.B.dylib is `(from libSystem)`, a framework its name.
    short = {re.sub(r"(\.[A-Za-z0-9]+)*\.dylib$", "", lib.rsplit("/", 1)[-1]) for lib in loads}
    unbound = []
    for line in llvm("llvm-nm", "-m", "--undefined-only", str(path)).splitlines():
        imported = re.search(r"external (\S+)(?: \(from (.+)\))?", line)
        if imported is None:
            problems.append(f"llvm-nm line not understood: {line!r}")
        elif imported.group(2) not in short and not imported.group(1).startswith(host_api):
            unbound.append(imported.group(1) + (f" (from {imported.group(2)})" if imported.group(2) else ""))
    if unbound:
        problems.append(
            f"{len(unbound)} imports bound to no library (dyld would refuse to load it): add them to {IMPORTS}: "
            + " ".join(unbound)
        )
    for p in problems:
        failures.append(f"{name}: {path.name}: {p}")
    return "macOS " + ".".join(map(str, asks)) if asks else "?"


def macos_wheel(art, tmp):
    m = re.search(r"macosx_(\d+)_(\d+)_(x86_64|arm64)\.whl$", art.name)
    arch, floor = m.group(3), (int(m.group(1)), int(m.group(2)))
    with zipfile.ZipFile(art) as z:
        so = next(n for n in z.namelist() if n.endswith(".so"))
        out = tmp / (art.name + ".so")
        out.write_bytes(z.read(so))
    asks = check_macho(art.name, arch, floor, "PyInit__grantid", ("_Py", "__Py"), out)
    rows.append((art.name, f"{arch} macOS", size(art), asks))


def macos_npm(art, tmp):
    arch = re.match(r"grantid-darwin-(x64|arm64)-", art.name).group(1).replace("x64", "x86_64")
    with tarfile.open(art) as t:
        member = next(m for m in t.getmembers() if m.name.endswith(".node"))
        out = tmp / (art.name + ".node")
        out.write_bytes(t.extractfile(member).read())
    asks = check_macho(art.name, arch, NPM_FLOOR[arch], "napi_register_module_v1", ("_napi_", "_node_api_"), out)
    rows.append((art.name, f"{arch} macOS", size(art), asks))


with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    for art in sorted(dist.iterdir()):
        name = art.name
        if "macosx_" in name or name.startswith("grantid-darwin-"):
            if llvm_bin is None:
                failures.append(f"{name}: a macOS artifact, and no LLVM_BIN to read it with")
            elif name.endswith(".whl"):
                macos_wheel(art, tmp)
            else:
                macos_npm(art, tmp)
        elif name.endswith(".whl"):
            arch, abi = ("aarch64" if "aarch64" in name else "x86_64"), ("musl" if "musllinux" in name else "gnu")
            with zipfile.ZipFile(art) as z:
                so = next(n for n in z.namelist() if n.endswith(".so"))
                out = tmp / Path(so).name
                out.write_bytes(z.read(so))
            floor = check(name, arch, abi, out)
            tag = ""
            if auditwheel:
                shown = subprocess.run(
                    [auditwheel, "show", "--json", str(art)], capture_output=True, text=True, check=True
                ).stdout
                tag = json.loads(shown)["overall_tag"]
                expect = "musllinux_1_2" if abi == "musl" else "manylinux_2_17"
                if not tag.startswith(expect):
                    failures.append(f"{name}: auditwheel finds {tag!r}, not {expect}")
            rows.append((name, f"{arch} {abi}", size(art), floor + (f"; auditwheel: {tag}" if tag else "")))
        elif name.endswith(".tgz") and re.match(r"grantid-linux-", name):
            arch, abi = platform_of(name)
            with tarfile.open(art) as t:
                member = next(m for m in t.getmembers() if m.name.endswith(".node"))
                out = tmp / Path(member.name).name
                out.write_bytes(t.extractfile(member).read())
            floor = check(name, arch, abi, out)
            rows.append((name, f"{arch} {abi}", size(art), floor))
        elif name.endswith(".tar.gz") and re.match(r"grantid-(c|cli)-", name):
            arch, abi = platform_of(name)
            cli = name.startswith("grantid-cli-")
            with tarfile.open(art) as t:
                if cli:
                    member = next(m for m in t.getmembers() if m.name.endswith("/grantid"))
                else:
                    member = next(
                        m for m in t.getmembers() if re.search(r"/lib/libgrantid\.so\.\d+\.\d+\.\d+$", m.name)
                    )
                out = tmp / (name + "-" + Path(member.name).name)
                out.write_bytes(t.extractfile(member).read())
            floor = check(name, arch, abi, out, static=cli and abi == "musl")
            if not cli:
                with tarfile.open(art) as t:
                    member = next(m for m in t.getmembers() if m.name.endswith("/lib/libgrantid.a"))
                    archive = tmp / (name + "-libgrantid.a")
                    archive.write_bytes(t.extractfile(member).read())
                if ".debug_info" in readelf(archive, "-S", "-W"):
                    failures.append(f"{name}: libgrantid.a carries debug info")
            rows.append((name, f"{arch} {abi}", size(art), floor))

# Every target of the matrix, each kind of artifact.
for arch, node_arch in (("x86_64", "x64"), ("aarch64", "arm64")):
    for abi in ("gnu", "musl"):
        wheel_tag = f"musllinux_1_2_{arch}" if abi == "musl" else f"manylinux_2_17_{arch}"
        for kind, pattern in (
            ("wheel", rf"cp39-abi3-.*{wheel_tag}.*\.whl$"),
            ("npm platform package", rf"^grantid-linux-{node_arch}-{abi}-.*\.tgz$"),
            ("C tarball", rf"^grantid-c-.*-{arch}-linux-{abi}\.tar\.gz$"),
            ("CLI tarball", rf"^grantid-cli-.*-{arch}-linux-{abi}\.tar\.gz$"),
        ):
            if not any(re.search(pattern, row[0]) for row in rows):
                failures.append(f"no {kind} for {arch} {abi} in {dist}")

if llvm_bin is not None:
    for arch, node_arch in (("x86_64", "x64"), ("arm64", "arm64")):
        for kind, pattern in (
            ("wheel", rf"cp39-abi3-macosx_\d+_\d+_{arch}\.whl$"),
            ("npm platform package", rf"^grantid-darwin-{node_arch}-.*\.tgz$"),
        ):
            if not any(re.search(pattern, row[0]) for row in rows):
                failures.append(f"no {kind} for macOS {arch} in {dist}")

print("| artifact | platform | size | needs |")
print("|---|---|---|---|")
for row in rows:
    print("| " + " | ".join(row) + " |")
if failures:
    print("\n".join(["", "FAILED:"] + failures), file=sys.stderr)
    sys.exit(1)
print(f"inspected {len(rows)} artifacts: ok")
