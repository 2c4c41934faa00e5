"""Start-up hook that ``tunefleet capture`` puts on PYTHONPATH: records @triton.autotune kernels
into $TUNEFLEET_CAPTURE, then runs the ``sitecustomize`` this file shadows, if there is one."""

import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("TUNEFLEET_CAPTURE"):
    from search_spaces.triton_capture import install_from_env

    install_from_env()

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
