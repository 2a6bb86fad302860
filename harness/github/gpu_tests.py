"""The GPU test job: correctness judged on the trusted side first, then by this checkout's tests (the
default branch's), on a pull request's kernel, in bubblewrap's sandbox; then the PR's own suite,
sandboxed too, as a further signal. The three steps and why: docs/harness-code.md.

    python -m harness gpu-tests CANDIDATE [--no-sandbox] [--device cuda|cpu] [-- PYTEST_ARGS...]

All steps run even if one fails; the exit code is the first failure's: 3 an output the reference
found wrong, or a kernel it could not check; pytest's (1 tests failed, 4 the kernel is not the
staged one, 5 no tests ran); 0 when all passed; 2 bad arguments or a CANDIDATE with no kernel to
stage; 126 no sandbox here (``--no-sandbox`` runs without; the workflow never passes it).
``--device cpu`` checks in Triton's interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from harness.core import command_output, exits, kernel_source, sandbox
from harness.core import markdown as md
from harness.core.paths import ROOT

TIMEOUT_S = 1500
PYTEST = ["-m", "pytest", "-n", "auto", "-p", "no:cacheprovider"]
EXIT_WRONG = 3  # the reference process found an output wrong, or could not check the kernel


def checked_by_the_reference(kernel: kernel_source.Staged, device: str, no_sandbox: bool) -> int:
    """The staged kernel on the exactness matrix, each output checked by the clock's reference
    process: 0 when every one is bit for bit bitsandbytes', else EXIT_WRONG, said in one line."""
    from harness.clock import judge

    print(f"gpu-tests: the reference process checks {kernel.describe()} on the exactness matrix", flush=True)
    extra = {"TRITON_INTERPRET": "1"} if device == "cpu" else {}
    launch = judge.candidate(kernel, extra, sandboxed=not no_sandbox)
    trusted = judge.trusted_env({"PYTHONPATH": kernel_source.python_path(ROOT), **extra})
    setup = {"device": device, "matrix": True}
    try:
        with judge.session({"nf4kernel": ("nf4kernel", launch)}, setup, trusted) as (session, _):
            session.quiet = device == "cuda"
            entries = session.exactness("nf4kernel")
    except ValueError as error:
        print(f"gpu-tests: the reference process could not check the kernel: {md.line(error, limit=None)}", flush=True)
        return EXIT_WRONG
    wrong = [e for e in entries if not e["ok"]]
    if wrong:
        said = wrong[0].get("reason") or "differs from bitsandbytes'"
        print(f"gpu-tests: wrong output: {wrong[0]['shape']} {wrong[0]['weight']}: {said} (exit 3)", flush=True)
        return EXIT_WRONG
    print(f"gpu-tests: {len(entries)} outputs bit for bit bitsandbytes', checked by the reference process", flush=True)
    return 0


def run(label: str, argv: list[str], *, no_sandbox: bool, cwd: Path, read: list[Path], cache: Path, env: dict) -> int:
    print(f"gpu-tests: {label}", flush=True)
    started = time.perf_counter()
    if no_sandbox:
        done = subprocess.run(argv, cwd=cwd, env={**os.environ, **env}, check=False, timeout=TIMEOUT_S)
    else:
        view = {"read": read, "write": [cache], "cwd": cwd, "env": env}
        done = sandbox.run(argv, timeout=TIMEOUT_S, stdout=None, **view)
    print(f"gpu-tests: {label}: exit {done.returncode} in {time.perf_counter() - started:.0f} s", flush=True)
    return done.returncode


def their_tests(candidate: Path) -> list[str]:
    """The PR's kernel test files (``tests/`` less ``tests/harness``) that this checkout lacks or holds
    otherwise: the rest ran above, on the same kernel. Every one where its conftest.py differs."""

    def files(root: Path) -> dict[str, bytes]:
        tests = root / "tests"
        found = {}
        for path in sorted(tests.rglob("*.py")) if tests.is_dir() else []:
            relative = path.relative_to(root)
            if relative.parts[1:2] != ("harness",) and path.is_file() and not path.is_symlink():
                found[relative.as_posix()] = path.read_bytes()
        return found

    ours, theirs = files(ROOT), files(candidate)
    if theirs.get("tests/conftest.py") != ours.get("tests/conftest.py"):
        return [name for name in theirs if Path(name).name.startswith("test_")]
    return [name for name, text in theirs.items() if Path(name).name.startswith("test_") and ours.get(name) != text]


def main(argv=None) -> int:
    parser = command_output.Parser(prog="python -m harness gpu-tests", description=__doc__.split("\n\n")[0])
    parser.add_argument("candidate", type=Path, help="the PR's checkout (the approved commit)")
    parser.add_argument("--no-sandbox", action="store_true", help="run without bubblewrap (the workflow never does)")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="where the reference checks (cpu: the interpreter)"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: both pytest runs' own arguments
    args, extra = parser.parse_args(argv[:cut]), argv[cut + 1 :]
    if not (args.candidate / ".git").exists():
        parser.error(f"{args.candidate} is not a git checkout")
    exits.torch_here("python -m harness gpu-tests", "tests")
    if not args.no_sandbox and (why := sandbox.why_not()):
        print(f"gpu-tests: no sandbox here: {why} (--no-sandbox runs without)", file=sys.stderr)
        return sandbox.EXIT_NO_SANDBOX
    candidate = args.candidate.resolve()
    try:
        with kernel_source.staged(str(candidate)) as kernel:
            cache = sandbox.kernel_cache(kernel.commit)  # the PR's commit's: both runs run its code
            env = {
                # The staged kernel ahead of this checkout (whose benchmarks/ and harness/ the tests import).
                "PYTHONPATH": kernel_source.python_path(kernel.path, ROOT),
                "NF4KERNEL_UNDER_TEST": str(kernel.path),
                **sandbox.cache_env(cache),
            }
            trusted = checked_by_the_reference(kernel, args.device, args.no_sandbox)
            # -o pythonpath=: pyproject's pythonpath = ["."] would put this checkout's nf4kernel first.
            ours = [sys.executable, *PYTEST, "-o", "pythonpath=", "--rootdir", str(ROOT), str(ROOT / "tests")]
            ours += ["--ignore", str(ROOT / "tests" / "harness"), *extra]
            tests = partial(run, no_sandbox=args.no_sandbox, cache=cache)
            label = f"the default branch's kernel tests on {kernel.describe()}"
            first = tests(label, ours, cwd=kernel.path, read=[kernel.path, ROOT], env=env)
            changed = their_tests(candidate)
            second = 0
            if not changed:
                print("gpu-tests: the PR's kernel tests are the default branch's, run above: nothing more to run")
            else:
                theirs = [sys.executable, *PYTEST, *changed, *extra]
                env = {"PYTHONPATH": kernel_source.python_path(candidate), **sandbox.cache_env(cache)}
                label = f"the PR's own kernel tests that differ from the default branch's ({len(changed)} files)"
                second = tests(f"{label}, in {candidate}", theirs, cwd=candidate, read=[candidate], env=env)
    except kernel_source.SourceError as error:
        print(f"gpu-tests: {' '.join(str(error).splitlines())} (exit 2)", file=sys.stderr)
        return 2
    return trusted or first or second
