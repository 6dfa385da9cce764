"""The usage sample store: the Parquet schema of one counter reading and its writer.

Files sit under `<base>/date=YYYY-MM-DD/`, the date being the day the file was WRITTEN (a late
reading of day D may sit in date=D+1). Written with pyarrow, so the Django sampler needs no JVM;
Spark reads the same directories with a path string (local, s3a://, hdfs://).

A row is a reading (every counter and gauge given) or a gap: the source could not be read at
`ts`, and every counter and gauge is null, never zero (docs/usage.md).
"""
import os
import uuid
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq

COUNTERS = ("messages_in", "messages_out", "bytes_in", "bytes_out")
GAUGES = ("stored_messages", "stored_bytes", "connections", "senders", "receivers")

SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("space", pa.string(), nullable=False),
        pa.field("address", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
    ]
    # Null on gaps only.
    + [pa.field(name, pa.int64(), nullable=True) for name in COUNTERS + GAUGES]
    + [
        # The counter instance the counters come from, and when it began counting (null:
        # unknown). Appended last: files written before they existed read them as null.
        pa.field("epoch", pa.string(), nullable=False),
        pa.field("since", pa.timestamp("us", tz="UTC"), nullable=True),
    ]
)
MEASURES = COUNTERS + GAUGES
REQUIRED = ("sample_id", "ts", "tenant", "space", "address", "source", "kind", "epoch")


def gap(row: dict) -> dict:
    """The row as a gap: the source could not be read, so nothing is known (not zero)."""
    return {**row, **dict.fromkeys(MEASURES)}


def partition_dir(base: str, written_at: datetime) -> str:
    """The directory of the files written at `written_at` (its UTC date)."""
    return f"{base.rstrip('/')}/date={_utc(written_at).date().isoformat()}"


def write_samples(rows: list[dict], base: str, written_at: datetime) -> str:
    """Writes the readings as ONE new Parquet file under base (a local path); returns its path."""
    missing = {name for row in rows for name in REQUIRED if row.get(name) is None}
    if missing:
        raise ValueError(f"samples lack {sorted(missing)}")
    for row in rows:
        given = sum(row.get(name) is not None for name in MEASURES)
        if given not in (0, len(MEASURES)):  # half a reading would bill as zeros
            raise ValueError(f"sample {row['sample_id']}: a reading gives every counter and "
                             "gauge, a gap none")
    return write_table(pa.Table.from_pylist(rows, schema=SCHEMA), base, written_at)


def write_table(table: pa.Table, base: str, written_at: datetime) -> str:
    """Writes a table of readings (SCHEMA) as one new file; readers never see it half written."""
    table = table.select(SCHEMA.names).cast(SCHEMA)
    directory = partition_dir(base, written_at)
    os.makedirs(directory, exist_ok=True)
    name = f"part-{_utc(written_at):%Y%m%dT%H%M%S}-{uuid.uuid4().hex}.parquet"
    # Spark and pyarrow skip names starting with "_" or ".": write there, then rename at once.
    tmp = os.path.join(directory, f".{name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    path = os.path.join(directory, name)
    os.replace(tmp, path)
    return path


def _utc(moment: datetime) -> datetime:
    # A naive datetime is taken as UTC, as everything in the store is.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
