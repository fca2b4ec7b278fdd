"""The script torchrun runs in each rank it forks (``torchrun --start-method=fork --run-path fuzz/rank_main.py``):
:func:`fuzz.rank_worker.main`. A non-zero return is the rank's exit status."""

from fuzz.rank_worker import main

status = main()
if status:
    raise SystemExit(status)
