"""Multi-rank fuzzing: Hypothesis in the driver, a persistent torchrun rank pool, watchdog, repro."""
