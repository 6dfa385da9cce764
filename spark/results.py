"""The result tables as files: the executors write them as Parquet, and whoever stores them
(the Celery task, into PostgreSQL) reads them back in batches with pyarrow, so that no row of a
table that grows with the fleet passes through the Spark driver.

Two layouts: the CLI's `<out>/<table>/day=<day>` (one partition per day, a re-run overwrites it)
and `run`'s `<out>/<table>` (the last run's table only, `day` a column).
"""
from collections.abc import Iterator
from datetime import date

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark.sql import DataFrame

BATCH_ROWS = 10_000


def write_days(results: dict[str, DataFrame], out: str, day: date) -> None:
    """Writes each table to <out>/<table>/day=<day>, replacing what a previous run wrote there."""
    for name, df in results.items():
        columns = [c for c in df.columns if c != "day"]
        df.select(*columns).write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}/day={day}")


def write_last(results: dict[str, DataFrame], out: str) -> dict[str, "Rows"]:
    """Writes each table to <out>/<table>, replacing the previous run's; its rows, to read."""
    written = {}
    for name, df in results.items():
        path = f"{out.rstrip('/')}/{name}"
        df.write.mode("overwrite").parquet(path)
        written[name] = Rows(path)
    return written


class Rows:
    """A written table's rows as dicts, read batch by batch each time it is iterated (a local
    path; Spark's `_SUCCESS` and `.crc` files are skipped). Timestamps come back as aware UTC
    datetimes, days as dates."""

    def __init__(self, path: str):
        self.path = path

    def __iter__(self) -> Iterator[dict]:
        dataset = ds.dataset(self.path, format="parquet")
        for batch in dataset.to_batches(batch_size=BATCH_ROWS):
            yield from _utc(pa.Table.from_batches([batch])).to_pylist()

    def __len__(self) -> int:
        return ds.dataset(self.path, format="parquet").count_rows()


def _utc(table: pa.Table) -> pa.Table:
    # Spark writes instants (INT96 by default: read as naive timestamps); they are UTC.
    schema = pa.schema([
        f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
        for f in table.schema])
    return table.cast(schema) if schema != table.schema else table

