"""The environment of the Python subprocesses that tests start (workers, servers, the CLI).

They import `asyncagents` from where this test run imported it: an installed wheel (the README's
``pip install '.[test]'``) or a source tree with its extension built in place
(``PYTHONPATH=$PWD/python``). Pointing them at the source tree alone breaks the first case, where
``python/asyncagents`` has no compiled ``_core``.
"""

from __future__ import annotations

import os
from pathlib import Path

import asyncagents

#: the directory holding the `asyncagents` package this test run uses
PACKAGE_PARENT = Path(asyncagents.__file__).resolve().parent.parent


def python_path(*extra: str | Path) -> str:
    """``PYTHONPATH`` for a subprocess: the package's directory, `extra`, then the current one."""
    paths = [str(PACKAGE_PARENT), *(str(p) for p in extra)]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(paths)
