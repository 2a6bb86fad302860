"""The exit codes every harness command shares, so a workflow step or a person reads one meaning
from one number whichever command said it. A command's own codes (the gate's 1 for too slow, 3 for
wrong output) are in its module's docstring."""

OK = 0
BAD_INPUT = 2  # argparse's own code for bad arguments; the harness uses it for any input it refuses
NO_GPU = 4  # a command that needs a CUDA GPU, where there is none: nothing was measured


def require(modules: tuple[str, ...], prog: str, where: str) -> None:
    """For a command that needs ``modules`` (torch, numpy) where this Python may lack them (the
    README's venv holds nox and asv alone): one line naming what is missing and ``where`` the command
    runs, and exit 4 (NO_GPU, as the gate's and torch_here's: nothing was measured), rather than a
    traceback."""
    import importlib.util
    import sys

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"{prog}: needs {', '.join(missing)}, which {sys.executable} lacks: run it {where} (exit {NO_GPU})",
            file=sys.stderr,
        )
        raise SystemExit(NO_GPU)


def torch_here(prog: str, session: str) -> None:
    """For a command that measures with torch: where this Python can't import it (the README's venv
    holds nox and asv alone), one line naming the environment that has it, and exit 4 (NO_GPU, as
    the gate's: nothing was measured), rather than a traceback."""
    import sys

    try:
        import torch  # noqa: F401
    except ImportError as error:
        print(
            f"{prog}: needs torch, which {sys.executable} can't import ({error}): run `nox -s {session}`, or the "
            f"command with .nox/torch/bin/python, the environment nox builds with torch (exit {NO_GPU})",
            file=sys.stderr,
        )
        raise SystemExit(NO_GPU) from None
