"""The main job: the asv suite for the current commit on this machine, then the history site.

On a CUDA GPU the GPU suite; without one only the CPU-interpreter smoke benchmarks, no verdict on
the kernel. Results go to .asv/results, seeded from benchmarks/history/; the site to .asv/html.

Exit 0: measured (and stored, with ``--store``), and the site built. 1: a benchmark failed or measured
nothing, or ``--store`` found no results of this machine to store. 2: bad arguments, or a
``--config`` that is no asv configuration. 4: a GPU suite, or ``--store``, asked for on a machine
without a CUDA GPU.
"""

from __future__ import annotations

import time

from harness.core import command_output, exits
from harness.history import asvrun, site, store


def log(message: str) -> None:
    print(f"bench: {message}", flush=True)


def main(argv=None) -> int:
    parser = command_output.Parser(prog="python -m harness bench", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(asvrun.SUITES), help="default: gpu with a CUDA GPU, else cpu")
    parser.add_argument("--quick", action="store_true", help="one sample per benchmark (a smoke run)")
    parser.add_argument("--store", action="store_true", help="copy this GPU machine's results into benchmarks/history")
    parser.add_argument("--no-publish", action="store_true", help="skip building the site")
    asvrun.add_config(parser)
    args = parser.parse_args(argv)
    exits.torch_here("python -m harness bench", "bench")  # asv runs the suite in this Python
    try:  # before minutes of measuring, not after
        results = asvrun.results_dir(args.config)
    except asvrun.ConfigError as error:
        parser.error(f"--config {error}")

    started = time.perf_counter()
    info = asvrun.register()
    log(asvrun.one_line(info))
    gpu = info["gpu"] != "none"
    suite = args.suite or ("gpu" if gpu else "cpu")
    if not gpu and suite != "cpu":
        log(f"the {suite} suite needs a CUDA GPU; none here (exit 4)")
        return exits.NO_GPU
    if not gpu and args.store:
        log("--store needs a CUDA GPU; none here: the committed history holds GPU machines only (exit 4)")
        return exits.NO_GPU
    if not gpu:
        log("no CUDA GPU: the CPU-interpreter smoke benchmark runs instead of the GPU suite (no speed verdict)")
    seeded = store.seed(results)
    if seeded:
        log(f"{seeded} files of the committed GPU history copied into {store.label(results)}")
    commit = asvrun.git("rev-parse", "HEAD")
    log(f"{commit[:8]}: {asvrun.SUITES[suite].about}")
    code = asvrun.run(commit, suite, info, args.config, quick=args.quick)
    found = asvrun.outcome(str(results), info["machine"], commit, asvrun.SUITES[suite].bench)
    log(f"{commit[:8]} on {info['machine']}: {found.line()}, {time.perf_counter() - started:.0f} s")
    stored = not args.store or store.store_and_say(results, info["machine"], "bench")
    if not args.no_publish:
        html = site.publish(args.config)
        log(
            f"the history site is in {html} ({time.perf_counter() - started:.0f} s in all); "
            "view it with `asv preview` or `python3 -m nox -s preview` (serves it on http://127.0.0.1:8080)"
        )
    return 0 if code == 0 and not found.failed and found.measured and stored else 1
