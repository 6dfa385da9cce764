"""The SparkSession of the usage jobs: one per process, with defaults fit for a small machine.

SPARK_MASTER picks the master (default `local[*]`). Under spark-submit the submitter's master
and settings win: only the job's own settings (JOB) are set, the time zone among them, so every
timestamp reads as UTC. A long-lived worker ends the session and its JVM after each job
(`release_session`).
"""
import logging
import os
import subprocess

from pyspark.sql import SparkSession

SMALL_MACHINE = {
    # A few partitions per core, adaptive execution merging the small ones: four rather than
    # two, since a task's hash map of (series, minute) groups then fits the CPU's caches better
    # (the space peaks' aggregations; tests/bench/bench_usage.py --stages shows it per stage).
    "spark.sql.shuffle.partitions": str(max(8, 4 * (os.cpu_count() or 2))),
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": os.environ.get("SPARK_DRIVER_MEMORY", "2g"),
    # The parallel collector, not Java's default G1: a batch job wants throughput rather than
    # short pauses (bench_usage.py --size 10m on two cores: the nightly job 51.3 s against
    # G1's 66.2 s, docs/usage.md "Figures"). Under spark-submit the submitter's options stand.
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
    "spark.executor.extraJavaOptions": "-XX:+UseParallelGC",
    "spark.sql.parquet.compression.codec": "zstd",
}


# What the usage jobs need wherever they run, under spark-submit too.
JOB = {
    "spark.sql.session.timeZone": "UTC",
    # The rollups aggregate millions of (series, hour) groups per task: the small fast map
    # Spark puts before its hash map fills at once and then costs a second lookup per row.
    "spark.sql.codegen.aggregate.map.twolevel.enabled": "false",
    # A broadcast join collects its smaller side to the driver first, and every side here
    # grows with the fleet (tenants, spaces, their hours): joined by shuffles instead.
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.autoBroadcastJoinThreshold": "-1",
}


def get_session(app_name: str = "maas-usage") -> SparkSession:
    """The process's SparkSession, created on first use and reused afterwards."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in JOB.items():
        builder = builder.config(key, value)
    # spark-submit starts the JVM first and hands its port to Python.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ and "SPARK_MASTER" not in os.environ
    if not submitted:
        builder = builder.master(os.environ.get("SPARK_MASTER", "local[*]"))
        for key, value in SMALL_MACHINE.items():
            builder = builder.config(key, value)
    # py4j logs every connection at INFO, even from __del__ at interpreter exit, after test
    # runners have closed the streams its handlers write to.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "WARN"))
    return spark


def release_session() -> None:
    """Stops the process's SparkSession and ends its JVM; the next `get_session` starts anew.

    For long-lived workers that run a job now and then: a stopped session leaves its JVM (and
    the heap it grew, up to `spark.driver.memory`) in the process. Measured at 100k addresses:
    the background worker held a 2.3 GiB driver between hourly usage jobs. Under spark-submit
    the JVM is the submitter's: only the session is stopped."""
    from pyspark import SparkContext

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
    elif SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is None or proc is None:
        return  # no JVM, or one this process did not start
    gateway.shutdown()
    # The JVM's gateway server exits when its stdin reaches EOF (pyspark's java_gateway).
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None
