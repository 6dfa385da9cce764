"""The authorization model in one place: which role may do which action on a tenant.

viewer reads; admin also reads the audit trail and manages address spaces, addresses and
messaging users; owner also manages members, changes the plans of address spaces and deletes the
tenant. Staff (operators) may do everything, and they alone set a tenant's quota: no role of
the tenant, not even owner, may raise its own limits. docs/authorization.md shows the same table.
"""
from enum import StrEnum

from .models import Role


class Action(StrEnum):
    READ = "read"
    READ_AUDIT = "read_audit"
    MANAGE_ADDRESSES = "manage_addresses"
    MANAGE_USERS = "manage_users"
    MANAGE_SPACES = "manage_spaces"
    CHANGE_SPACE_PLAN = "change_space_plan"
    MANAGE_MEMBERS = "manage_members"
    DELETE_TENANT = "delete_tenant"
    SET_QUOTA = "set_quota"
    CLOSE_CONNECTIONS = "close_connections"


# What only operators (staff) may do: tenant_for() lets staff do everything.
OPERATOR_ONLY = frozenset({Action.SET_QUOTA})


# Which role is higher: claims and invitations only ever raise a membership by this order.
RANK = {Role.VIEWER: 1, Role.ADMIN: 2, Role.OWNER: 3}

ALLOWED: dict[str, frozenset[Action]] = {
    Role.VIEWER: frozenset({Action.READ}),
    Role.ADMIN: frozenset(
        {Action.READ, Action.READ_AUDIT, Action.MANAGE_ADDRESSES, Action.MANAGE_USERS,
         Action.MANAGE_SPACES, Action.CLOSE_CONNECTIONS}
    ),
    Role.OWNER: frozenset(Action) - OPERATOR_ONLY,
}


def role_allows(role: str | None, action: Action) -> bool:
    return role is not None and action in ALLOWED.get(role, frozenset())
