# MPS probe only (23rd session, not project code): with MPS_PROBE_NO_CLUSTERS=1, kernel.fused.wrapper's cluster
# sizes are emptied as it loads, so every rank's tile configs are the unclustered ones.
import importlib.abc
import importlib.machinery
import os
import sys

if os.environ.get("MPS_PROBE_NO_CLUSTERS") == "1":
    class _Patch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "kernel.fused.wrapper":
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            loader = spec.loader
            orig = loader.exec_module

            def exec_module(module):
                orig(module)
                module.CLUSTER_SIZES = ()
            loader.exec_module = exec_module
            return spec
    import importlib.util
    sys.meta_path.insert(0, _Patch())
