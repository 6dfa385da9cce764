"""OpenAPI types of the member, invitation and audit bodies of `api.py` (describing only, as
core/api/schemas.py says why; `schema.py` holds the security schemes)."""
from rest_framework import serializers as s

from core.api.manifests import MAAS_API
from core.api.schemas import Described, always, list_of
from eventlog.api import ConfigEvent
from tenants.api.schemas import ROLES
from tenants.models import Invitation as InvitationModel

INVITATION_PHASES = [InvitationModel.PENDING, InvitationModel.ACCEPTED, InvitationModel.REVOKED,
                     InvitationModel.EXPIRED]


class MemberMeta(Described):
    name = s.CharField(help_text="The member's username.")


class MemberSpec(Described):
    role = s.ChoiceField(choices=ROLES)
    email = s.CharField(allow_blank=True)


class MemberStatus(Described):
    since = s.DateTimeField()
    signedInYet = s.BooleanField()


class Member(Described):
    apiVersion = always(MAAS_API)
    kind = always("Member")
    metadata = MemberMeta()
    spec = MemberSpec()
    status = MemberStatus()


class MemberUpdateSpec(Described):
    role = s.ChoiceField(choices=ROLES)


class MemberUpdate(Described):
    """A role change; `{"role": ...}` at the top is accepted too."""

    spec = MemberUpdateSpec()


class InvitationMeta(Described):
    name = s.UUIDField(help_text="The invitation's id.")
    creationTimestamp = s.DateTimeField()


class InvitationSpec(Described):
    email = s.EmailField()
    role = s.ChoiceField(choices=ROLES)


class InvitationStatus(Described):
    phase = s.ChoiceField(choices=INVITATION_PHASES)
    expiresAt = s.DateTimeField()
    invitedBy = s.CharField(allow_null=True)
    acceptedBy = s.CharField(allow_null=True)
    acceptUrl = s.URLField(required=False, help_text="The link, in the answer to the invitation "
                                                     "only (Cache-Control: no-store).")
    emailSent = s.BooleanField(required=False, help_text="In the answer to the invitation only.")


class Invitation(Described):
    apiVersion = always(MAAS_API)
    kind = always("Invitation")
    metadata = InvitationMeta()
    spec = InvitationSpec()
    status = InvitationStatus()


class InvitationManifest(Described):
    """Whom to invite, and to which role."""

    spec = InvitationSpec()


class AuditEvent(ConfigEvent):
    tenant = s.CharField(allow_null=True,
                         help_text="The tenant's name; null for a plan event (operators').")


MemberList = list_of(Member, "MemberList", MAAS_API)
InvitationList = list_of(Invitation, "InvitationList", MAAS_API)
AuditEventList = list_of(AuditEvent, "AuditEventList", MAAS_API)
