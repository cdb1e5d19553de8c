"""Running a plan: the step wrapper (wrapper), fact checkers, the step DAG and its one scheduler (stepdag), the fork server and warm workers, run records, interrupts, monitoring, proof memos."""
