"""Who a user is at the identity provider, and which memberships its claims granted."""
from django.conf import settings
from django.db import models


class OidcIdentity(models.Model):
    """A user's subject at one issuer; `claim_roles` are the memberships its claims granted.

    Claims are authoritative for those memberships only: one that disappears from the claims
    is removed at the next sign-in, one made in the product is left alone.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities"
    )
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    claim_roles = models.JSONField(default=dict, blank=True)  # {tenant slug: role}
    # Digest of what the last claims mapped to: a session refresh with the same claims writes
    # nothing (API access tokens never apply claims).
    claims_digest = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_subject")
        ]
        verbose_name = "OpenID Connect identity"
        verbose_name_plural = "OpenID Connect identities"

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
