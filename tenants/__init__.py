"""Tenants, their members and roles, plans, quotas and personal access tokens."""
