"""REST API views, one module per resource: address spaces, addresses, messaging users, plans,
the config log and usage.

Every view resolves its tenant through `tenants.access.tenant_for`, so an outsider gets 404,
and every write calls one service function. PUT replaces a spec, PATCH merges a JSON merge
patch (RFC 7386) into it first; plans are everyone's to read and operators' to write."""
