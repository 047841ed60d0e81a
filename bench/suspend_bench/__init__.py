"""bench_suspend_cluster's parts: the set-up, the session watch, the rounds."""
