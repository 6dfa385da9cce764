"""PySpark jobs of MaaS: usage rollups and quota evaluation. No Django imports anywhere here."""
