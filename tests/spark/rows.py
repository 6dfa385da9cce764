"""A test's small DataFrame as a list of dicts, as the jobs' tables read back (spark.results):
aware UTC datetimes, dates. Tests may collect to the driver; the jobs never do."""
from pyspark.sql import DataFrame


def collect(df: DataFrame) -> list[dict]:
    # Arrow carries timestamps with the session's zone (UTC, spark.session.JOB).
    return df.toArrow().to_pylist()
