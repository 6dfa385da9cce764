"""The resource kinds maasctl knows: their API paths, names on the command line and how an
object's name maps to its URL (an Address, MessagingUser or Connection is named
`<space>.<name>`)."""
from dataclasses import dataclass

from .errors import UsageError


@dataclass(frozen=True)
class Kind:
    kind: str  # EnMasse's kind, e.g. AddressSpace
    group: str  # the API group, as kubectl prints it: address.enmasse.io/shop.orders
    plural: str
    aliases: tuple[str, ...]
    collection: str  # the list path; {tenant} and {space} are filled in
    in_space: bool = False  # named `<space>.<name>`, listed per space
    tenant_scoped: bool = True
    # What the data plane reports now (a client connection), not configuration: no manifest,
    # listed one space at a time, and the URL takes the server's id without `<space>.`.
    live: bool = False

    @property
    def ref(self) -> str:
        return f"{self.kind.lower()}.{self.group}" if self.group else self.kind.lower()

    def list_path(self, tenant: str = "", space: str = "") -> str:
        return self.collection.format(tenant=tenant, space=space)

    def object_path(self, name: str, tenant: str = "") -> str:
        space = space_of(name) if self.in_space else ""
        if self.live:
            name = name[len(space) + 1:]
        return f"{self.list_path(tenant, space)}{name}/"

    def name_of(self, obj: dict) -> str:
        """The name the command line takes back: a connection's `<space>.<id>`."""
        meta = obj.get("metadata") or {}
        return f"{meta.get('addressSpace')}.{meta.get('name')}" if self.live else meta.get("name")


KINDS = [
    Kind("AddressSpace", "enmasse.io", "addressspaces", ("addressspace", "as"),
         "tenants/{tenant}/addressspaces/"),
    Kind("Address", "enmasse.io", "addresses", ("address", "addr"),
         "tenants/{tenant}/addressspaces/{space}/addresses/", in_space=True),
    Kind("MessagingUser", "user.enmasse.io", "messagingusers",
         ("messaginguser", "msgusr", "users", "user"),
         "tenants/{tenant}/addressspaces/{space}/users/", in_space=True),
    Kind("AddressSpacePlan", "admin.enmasse.io", "addressspaceplans",
         ("addressspaceplan", "asp"), "addressspaceplans/", tenant_scoped=False),
    Kind("AddressPlan", "admin.enmasse.io", "addressplans", ("addressplan", "ap"),
         "addressplans/", tenant_scoped=False),
    Kind("Tenant", "maas.io", "tenants", ("tenant",), "tenants/", tenant_scoped=False),
]
# Kinds that are read and deleted, never applied.
LIVE = [
    Kind("Connection", "maas.io", "connections", ("connection", "conn"),
         "tenants/{tenant}/addressspaces/{space}/connections/", in_space=True, live=True),
]
BY_KIND = {k.kind: k for k in KINDS}
# EnMasse's list kinds: `apply` applies each item.
LIST_KINDS = {"List"} | {f"{k.kind}List" for k in KINDS}


def lookup(word: str) -> Kind:
    """A kind from what a user types: `addressspaces`, `as`, `Address`, `address.enmasse.io`."""
    w = word.lower().split(".")[0]
    for k in KINDS + LIVE:
        if w in (k.kind.lower(), k.plural, *k.aliases):
            return k
    names = ", ".join(k.plural for k in KINDS + LIVE)
    raise UsageError(f'the server doesn\'t have a resource type "{word}" (one of {names})')


def of_manifest(doc: dict) -> Kind:
    kind = doc.get("kind")
    if kind not in BY_KIND:
        raise UsageError(f"unknown kind {kind!r} (one of {', '.join(sorted(BY_KIND))}, "
                         "or a List of them)")
    return BY_KIND[kind]


def space_of(name: str) -> str:
    """The address space of an Address or MessagingUser named `<space>.<name>`."""
    space, dot, rest = name.partition(".")
    if not dot or not space or not rest:
        raise UsageError(f'"{name}" must be named <address space>.<name>, as in EnMasse '
                         "(e.g. myspace.myqueue)")
    return space
