"""Where the checkout is: every harness module finds the repository's files from here."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
