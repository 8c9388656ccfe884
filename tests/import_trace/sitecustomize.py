"""Test-only start-up hook (on PYTHONPATH in the end-to-end tests): when CROSSMODAL_IMPORT_TRACE names a
directory, every `python -m crossmodal ...` process writes, at exit, its command line and the files of the
`crossmodal` modules it imported, so that a test can compare what a stage ran with what it depends on."""
import atexit
import json
import os
import sys

_TRACE = os.environ.get("CROSSMODAL_IMPORT_TRACE")


def _dump() -> None:
    def ours(name: str, module) -> bool:  # `python -m crossmodal` runs crossmodal/__main__.py as __main__
        spec = getattr(module, "__spec__", None)
        return (spec.name if name == "__main__" and spec else name).split(".")[0] == "crossmodal"

    files = sorted({m.__file__ for name, m in list(sys.modules.items())
                    if ours(name, m) and getattr(m, "__file__", None)})
    with open(os.path.join(_TRACE, f"{os.getpid()}.json"), "w") as out:
        json.dump({"argv": sys.argv, "files": files}, out)


if _TRACE:
    atexit.register(_dump)
