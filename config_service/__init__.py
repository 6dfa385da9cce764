"""The config log (ConfigEvent), its projections, the service functions and the REST API."""
