"""Portal forms; every rule beyond the shape lives in the service functions."""
from django import forms

from tenants.models import AddressPlan, AddressSpacePlan

from .plans import describe_space_plan


class SpaceForm(forms.Form):
    name = forms.SlugField(label="Name", max_length=63)
    type = forms.ChoiceField(label="Type", choices=[("standard", "standard (router + brokers)"),
                                                    ("brokered", "brokered (broker only)")])
    plan = forms.ChoiceField(label="Plan")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # In words (what fits in each), not the credits as stored: a tenant picks by them.
        self.fields["plan"].choices = [
            (p.name, f"{describe_space_plan(p, p.address_plans.all())} [{p.address_space_type}]")
            for p in AddressSpacePlan.objects.order_by("display_order").prefetch_related(
                "address_plans")]


class AddressForm(forms.Form):
    address = forms.CharField(label="Address", max_length=200)
    type = forms.ChoiceField(label="Type", choices=[(t, t) for t in (
        "queue", "topic", "anycast", "multicast", "subscription", "deadletter")])
    plan = forms.ChoiceField(label="Plan")
    topic = forms.CharField(label="Topic (subscriptions)", required=False)
    deadletter = forms.CharField(label="Deadletter address", required=False)

    def __init__(self, *args, space=None, **kwargs):
        super().__init__(*args, **kwargs)
        plans = AddressPlan.objects.order_by("display_order")
        if space is not None:
            plans = plans.filter(space_plans__name=space.plan)
            if space.type == "brokered":
                self.fields["type"].choices = [(t, t) for t in ("queue", "topic", "deadletter")]
        self.fields["plan"].choices = [(p.name, f"{p.name} ({p.address_type})") for p in plans]


class PlanForm(forms.Form):
    plan = forms.ChoiceField(label="New plan")

    def __init__(self, *args, choices=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["plan"].choices = choices


class BulkForm(forms.Form):
    manifest = forms.FileField(label="EnMasse YAML (Address documents or an AddressList)")


class UserForm(forms.Form):
    username = forms.CharField(label="Username", max_length=64)
    send = forms.CharField(label="May send to (patterns, comma separated)", required=False)
    recv = forms.CharField(label="May receive from (patterns, comma separated)", required=False)


class PermissionsForm(forms.Form):
    send = forms.CharField(label="May send to", required=False)
    recv = forms.CharField(label="May receive from", required=False)


def rules(send: str, recv: str) -> list[dict]:
    out = []
    for op, text in (("send", send), ("recv", recv)):
        patterns = [p.strip() for p in (text or "").split(",") if p.strip()]
        if patterns:
            out.append({"addresses": patterns, "operations": [op]})
    return out


ROLE_CHOICES = [("viewer", "viewer: reads"),
                ("admin", "admin: manages address spaces, addresses and messaging users"),
                ("owner", "owner: also members, plans and deleting the tenant")]


class InviteForm(forms.Form):
    email = forms.EmailField(label="Email address")
    role = forms.ChoiceField(label="Role", choices=ROLE_CHOICES, initial="viewer")


class RoleForm(forms.Form):
    role = forms.ChoiceField(label="Role", choices=ROLE_CHOICES)


class DeleteTenantForm(forms.Form):
    name = forms.CharField(label="Type the tenant's name to confirm")
