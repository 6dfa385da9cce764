"""Admin of identities: which subject at which issuer is which user."""
from django.contrib import admin

from .models import OidcIdentity


@admin.register(OidcIdentity)
class OidcIdentityAdmin(admin.ModelAdmin):
    list_display = ("user", "issuer", "subject", "last_sign_in")
    search_fields = ("user__username", "subject")
    readonly_fields = ("claim_roles", "claims_digest", "created_at", "last_sign_in")
