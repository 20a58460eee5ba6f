"""The consumer group, its generations and the worker pool."""
