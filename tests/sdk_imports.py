"""The official SDKs (`openai`, `anthropic`) load on first use, not when a test module imports them.

Importing `anthropic` takes ~1.5 s and `openai` ~0.5 s (thousands of pydantic models), and every
test process, each xdist worker included, imports every test module while collecting: without
this, each paid ~2 s for the few modules that call an SDK, whether or not it ran one of their
tests. `defer()` puts a stand-in in `sys.modules`: `import openai` binds it, and the first read
of a name the stand-in does not hold (`openai.OpenAI`, `openai.types`) imports the real package,
which then takes the stand-in's place in `sys.modules`; the stand-in hands every later read on
to it. A module that needs an SDK's names at import time (`from openai.types import ...`) loads
it then: the tests import those names under `TYPE_CHECKING` only.

Collectors read dunder names off every module-level object (pytest `__test__` and `__bases__`,
hypothesis `__file__` of every module): the stand-in holds `__spec__` and `__file__`, and answers
other dunders as absent without loading, as both packages do. (`importlib.util.LazyLoader` does
not serve: on Python 3.11 the next `import openai` reads the lazy module's `__spec__`, and any
read loads it.)
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

SDKS = ("openai", "anthropic")

_loading = threading.Lock()

_LOADING_DUNDERS = frozenset({"__path__", "__all__", "__version__"})
"""The dunder names a read of loads the package (`__path__`: importing a submodule)."""


class DeferredModule(types.ModuleType):
    """Stands in for the package `__spec__.name` until one of its names is read."""

    def __getattr__(self, attr: str) -> Any:  # only for what the stand-in does not hold
        name = self.__spec__.name if self.__spec__ is not None else self.__name__
        loaded = sys.modules.get(name) is not self
        if not loaded and attr.startswith("__") and attr not in _LOADING_DUNDERS:
            # What collectors probe every module-level object for (`__test__`, `__bases__`, …):
            # neither package defines it, and asking must not load it.
            raise AttributeError(attr)
        return getattr(self._real(), attr)

    def _real(self) -> types.ModuleType:
        name = self.__spec__.name if self.__spec__ is not None else self.__name__
        with _loading:
            if sys.modules.get(name) is self:
                del sys.modules[name]
                try:
                    importlib.import_module(name)
                except BaseException:
                    sys.modules[name] = self
                    raise
        return sys.modules[name]


def defer(names: tuple[str, ...] = SDKS) -> None:
    """Make each of `names` not imported yet load on the first read of one of its names."""
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        stand_in = DeferredModule(name)
        stand_in.__spec__ = spec
        stand_in.__file__ = spec.origin  # read off every module by hypothesis, for one
        sys.modules[name] = stand_in
