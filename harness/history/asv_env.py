"""An asv plugin (``"plugins"`` in asv.conf.json): this Python as ``existing-py<X.Y>``, its results'
``python`` ``X.Y``, wherever the interpreter lives (``-E stable-existing:same``). asv's own
``--python=same`` names the environment and the graph parameter after the interpreter's path, so
another clone or venv started a new series of one-point lines.
"""

from __future__ import annotations

import os
import sys

from asv import util
from asv.environment import ExistingEnvironment, get_env_name

SPEC = "stable-existing:same"


def python_version(executable: str) -> str:
    """``X.Y`` of the interpreter at ``executable``."""
    if executable == "same":
        return f"{sys.version_info[0]}.{sys.version_info[1]}"
    code = "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
    return util.check_output([os.path.abspath(util.which(executable)), "-c", code]).strip()


class StableExistingEnvironment(ExistingEnvironment):
    """The running Python, as asv's ``existing`` environment, known by its version alone."""

    tool_name = "stable-existing"

    def __init__(self, conf, executable, requirements, tagged_env_vars):
        self._version = python_version(executable)  # before the base class, which reads self.name
        super().__init__(conf, executable, requirements, tagged_env_vars)

    @property
    def python(self) -> str:
        return self._version

    @property
    def name(self) -> str:
        return get_env_name("existing", self._version, {}, self._tagged_env_vars)
