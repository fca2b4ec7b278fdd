"""An implementation module whose import never finishes, or ends the process, in a rank told so
(``tests.engine.never_loads:Anything``, through the pool's ``extra_env``): ``_GEMM_RS_TEST_NEVER_LOADS=1`` -- the
rank never says hello, so its pool must fail to start within ``fuzz.pool.START_TIMEOUT``
(tests/engine/test_pool_lifecycle.py) instead of waiting forever; ``_GEMM_RS_TEST_EXIT_ON_NODE=<node>`` -- the ranks
of that node exit with code 5 before they say hello (tests/engine/test_multi_node.py). Imported anywhere else it is
an empty module."""

import os
import time

if os.environ.get("_GEMM_RS_TEST_NEVER_LOADS") == "1":
    time.sleep(3600)
_exit_on = os.environ.get("_GEMM_RS_TEST_EXIT_ON_NODE")
if _exit_on is not None and _exit_on == os.environ.get("_GEMM_RS_NODE"):
    os._exit(5)
