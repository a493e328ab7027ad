"""Generic concurrency for the operator: work queue, priority gate, worker threads, write lanes."""
