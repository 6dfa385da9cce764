"""Service functions: the only way address spaces, addresses, messaging users and plans change.

Each one validates, checks plans, credits and the tenant quota, then appends its ConfigEvent(s)
in one transaction (`eventlog.log.append`), which also updates the projections and the outbox.
One module per aggregate; callers use them from here."""
from .address_spaces import (
    TenantSpaces,
    change_address_space_plan,
    create_address_space,
    delete_address_space,
    remove_address_space,
)
from .addresses import (
    STORING_TYPES,
    address_counts,
    create_address,
    create_addresses,
    delete_address,
    purge_address,
    update_address,
)
from .connections import close_connection, find_connection, list_connections
from .messaging_users import create_messaging_user, delete_messaging_user, update_messaging_user
from .placement import address_plan_status, space_plan_status
from .plans import (
    create_address_plan,
    create_space_plan,
    delete_address_plan,
    delete_space_plan,
    replace_address_plan,
    replace_space_plan,
)

__all__ = [
    "STORING_TYPES",
    "TenantSpaces",
    "address_counts",
    "address_plan_status",
    "change_address_space_plan",
    "close_connection",
    "create_address",
    "find_connection",
    "list_connections",
    "create_address_plan",
    "create_address_space",
    "create_addresses",
    "create_messaging_user",
    "create_space_plan",
    "delete_address",
    "delete_address_plan",
    "delete_address_space",
    "delete_messaging_user",
    "delete_space_plan",
    "purge_address",
    "remove_address_space",
    "replace_address_plan",
    "replace_space_plan",
    "space_plan_status",
    "update_address",
    "update_messaging_user",
]
