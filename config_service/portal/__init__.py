"""The tenant self-service portal: server-rendered pages over the same service functions."""
