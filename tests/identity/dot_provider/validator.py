"""The claims an operator maps in DOT: profile and email, `groups` (Django group names, no
leading slash) and a flat `roles` claim (groups named `role:<role>`), in the ID token and at
userinfo."""
from oauth2_provider.oauth2_validators import OAuth2Validator

ROLE = "role:"


class ClaimsValidator(OAuth2Validator):
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "openid", "roles": "openid"}

    def get_additional_claims(self, request):
        user = request.user
        names = sorted(user.groups.values_list("name", flat=True))
        return {
            "preferred_username": user.username,
            "email": user.email,
            "email_verified": True,
            "name": user.get_full_name() or user.username,
            "groups": [n for n in names if not n.startswith(ROLE)],
            "roles": [n.removeprefix(ROLE) for n in names if n.startswith(ROLE)],
        }
