"""The link stubs of the macOS frameworks that grantid's builds import.

Usage: python frameworks.py SDKROOT

zig ships a stub of libSystem only. The authorities also call Apple's
Security, CoreFoundation and SystemConfiguration frameworks (the keychain's
roots for `sslrootcert=system`, through rustls-native-certs; the host name,
through tokio-postgres's whoami), present on every macOS. This writes, for
each, the text stub the linker reads instead of the framework itself
(`SDKROOT/System/Library/Frameworks/X.framework/X.tbd`, TAPI v4): its
install name and the names it exports. Nothing of Apple's SDK is copied: the
names are the ones the builds import (imports.txt, one per line), each given
to its framework by the rule below.

A name that no rule places stops the build; a name the builds import but
imports.txt lacks is found by scripts/lib/install/inspect_artifacts.py,
which fails on any import not bound to a system library.
"""

import sys
from pathlib import Path

# Framework -> the prefixes of the names it exports (Apple's naming).
FRAMEWORKS = {
    "CoreFoundation": ("_CF", "_kCF", "___CF"),
    "Security": ("_Sec", "_kSec", "_Authorization", "_CMSDecoder", "_CMSEncode", "_kCMS", "_SSL"),
    "SystemConfiguration": ("_SC", "_kSC"),
}
# Names these prefixes would misplace: CFNetwork's (a framework of its own,
# with CF names). Such a name stops the build until it has a rule.
ELSEWHERE = ("_CFHost", "_CFHTTP", "_CFFTP", "_CFNetwork", "_kCFHTTP", "_kCFFTP", "_kCFStream", "_kCFProxy", "_kCFNetwork")
TARGETS = "[ x86_64-macos, arm64-macos ]"


def framework_of(name):
    if name.startswith(ELSEWHERE):
        return None
    for framework, prefixes in FRAMEWORKS.items():
        if name.startswith(prefixes):
            return framework
    return None


def main():
    root = Path(sys.argv[1])
    names = [n.strip() for n in (Path(__file__).parent / "imports.txt").read_text().splitlines()]
    names = [n for n in names if n and not n.startswith("#")]
    placed = {f: [] for f in FRAMEWORKS}
    unplaced = [n for n in names if framework_of(n) is None]
    if unplaced:
        sys.exit(f"no framework rule places {unplaced} (scripts/lib/macos/frameworks.py)")
    for n in names:
        placed[framework_of(n)].append(n)
    for framework, symbols in placed.items():
        folder = root / "System/Library/Frameworks" / f"{framework}.framework"
        folder.mkdir(parents=True, exist_ok=True)
        listed = ", ".join(sorted(set(symbols)))
        (folder / f"{framework}.tbd").write_text(
            "--- !tapi-tbd\n"
            "tbd-version:     4\n"
            f"targets:         {TARGETS}\n"
            f"install-name:    '/System/Library/Frameworks/{framework}.framework/Versions/A/{framework}'\n"
            "current-version: 1\n"
            "compatibility-version: 1\n"
            "exports:\n"
            f"  - targets:         {TARGETS}\n"
            f"    symbols:         [ {listed} ]\n"
            "...\n"
        )


if __name__ == "__main__":
    main()
