"""One local SparkSession (local[2]) for the whole test session: starting one costs seconds."""
import os

import pytest

from spark.session import get_session


@pytest.fixture(scope="session")
def spark():
    previous = os.environ.get("SPARK_MASTER")
    os.environ["SPARK_MASTER"] = "local[2]"
    try:
        session = get_session("maas-tests")
    finally:
        if previous is None:
            del os.environ["SPARK_MASTER"]
        else:
            os.environ["SPARK_MASTER"] = previous
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()
