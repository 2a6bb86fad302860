"""A release's two checks that need no install: the tag names the package's version, and the wheel
holds the kernel package (its modules and py.typed) and its own dist-info, nothing else.

    python tools/release/check_dist.py --tag v0.1.0        # exit 1 unless nf4kernel.__version__ is 0.1.0
    python tools/release/check_dist.py dist/nf4kernel-*.whl  # exit 1, listing what is wrong, otherwise

The version is read from nf4kernel/__init__.py's text (its one source; pyproject reads it the same way),
so this imports nothing. Exit 2: bad input (no argument, a file that is no wheel), said in one line.
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nf4kernel"


def source_version() -> str:
    found = re.search(r'^__version__ = "([^"]+)"$', (PACKAGE / "__init__.py").read_text(), re.MULTILINE)
    if not found:
        raise ValueError('nf4kernel/__init__.py has no __version__ = "..." line')
    return found.group(1)


def wheel_problems(names: list[str], version: str) -> list[str]:
    """What is wrong with a wheel of these member names: anything outside the package and its
    dist-info, a module of the checkout's package missing, or no py.typed."""
    dist_info = f"nf4kernel-{version}.dist-info/"
    problems = [
        f"{name}: outside nf4kernel/ and {dist_info}"
        for name in names
        if not name.startswith(("nf4kernel/", dist_info))
    ]
    shipped = {name for name in names if name.startswith("nf4kernel/")}
    expected = {f"nf4kernel/{p.name}" for p in PACKAGE.glob("*.py")} | {"nf4kernel/py.typed"}
    problems += [f"{name}: missing" for name in sorted(expected - shipped)]
    problems += [f"{name}: not a module of the checkout's nf4kernel/" for name in sorted(shipped - expected)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", help="the release's tag, v<version>")
    parser.add_argument("wheels", nargs="*", type=Path)
    args = parser.parse_args(argv)
    if not args.tag and not args.wheels:
        print("check_dist: name a --tag or a wheel", file=sys.stderr)
        return 2
    version = source_version()
    problems = []
    if args.tag and args.tag != f"v{version}":
        problems.append(f"the tag {args.tag} is not v{version}, nf4kernel/__init__.py's version")
    for wheel in args.wheels:
        try:
            with zipfile.ZipFile(wheel) as archive:
                names = archive.namelist()
        except (OSError, zipfile.BadZipFile) as error:
            print(f"check_dist: {wheel}: not a wheel ({error})", file=sys.stderr)
            return 2
        problems += [f"{wheel.name}: {problem}" for problem in wheel_problems(names, version)]
        if not problems:
            count = sum(n.startswith("nf4kernel/") for n in names)
            print(f"{wheel.name}: nf4kernel/ ({count} files, py.typed) and its dist-info alone")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if args.tag and not problems:
        print(f"the tag {args.tag} is nf4kernel {version}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
