"""Spark jobs runnable with `python -m` or `spark-submit`."""
