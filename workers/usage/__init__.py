"""Usage metering: sampling counters into the usage store, and running the nightly Spark job."""
