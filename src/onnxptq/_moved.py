"""Old import paths of modules that moved when the package took its current layout.

``import onnxptq.bf16`` (and ``from onnxptq.evaluate import cosine``, ...) keep working: a
meta-path finder answers each old name with the module that now holds its contents, the very same
module object, so there is one copy of every function and no shim file at the package root. New
code imports the new paths; this table is the only place the old ones appear.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

#: old module name -> the module that holds its public names now
MOVED: dict[str, str] = {
    "onnxptq.plan": "onnxptq.pipeline.plan",
    "onnxptq.solve": "onnxptq.pipeline.solve",
    "onnxptq.emit": "onnxptq.pipeline.emit",
    "onnxptq.bf16": "onnxptq.conversion",
    "onnxptq.fp16": "onnxptq.conversion",
    "onnxptq.metrics": "onnxptq.analysis.metrics",
    "onnxptq.evaluate": "onnxptq.analysis.compare",
    "onnxptq.report": "onnxptq.analysis.report",
    "onnxptq.infer": "onnxptq.analysis.infer",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.target_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.target_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The target module ran when it was imported; only give it back its own spec, which the
        import system replaced with the alias's (relative imports inside it read ``__spec__``)."""
        module.__spec__ = self.target_spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
