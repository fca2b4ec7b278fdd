"""Adapters that put third-party GEMM-RS implementations under the gate.

An adapter subclasses :class:`kernel.interface.GemmRsImplementation`, implements ``_run`` by calling the
third-party op (and sets ``last_path`` on every call), names that path in ``main_path``, says in
``main_path_support()`` what the host needs for it (a host without it fails the gate with the reason), and
declares in ``waived_clauses`` every contract clause the op legitimately does not offer, with the reason.
The suite reports those clauses as skipped with that reason; everything else is checked as for our own
kernel. See README.md, "Gating another implementation".
"""
