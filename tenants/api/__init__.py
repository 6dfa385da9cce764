"""The REST resources of tenants themselves and their quotas (`/api/v1/tenants/`)."""
