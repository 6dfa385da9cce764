// A real OpenID Connect provider (panva's oidc-provider) set up like a Keycloak realm, for
// MaaS's tests and local development: issuer <origin>/realms/<realm>, a password login page,
// `groups` ("/tenants/acme/admin") and `realm_access.roles` in the tokens, JWT access tokens
// signed with the realm's keys (published at <issuer>/protocol/openid-connect/certs) or opaque
// ones, token introspection (RFC 7662) and revocation (RFC 7009), PKCE required, RP-initiated
// logout (which can be left out of discovery, as some providers do), and the device
// authorization grant (RFC 8628) for command-line clients such as maasctl.
//
//   node provider.mjs CONFIG.json
//
// CONFIG: {"port", "issuer", "realm", "jwks": {"keys": [private JWKs]},
//          "clients": [{"client_id", "client_secret", "redirect_uris", "post_logout_redirect_uris"}],
//          "audience": "maas", "accessTokenTTL": 300,
//          "accessTokenFormat": "jwt" | "opaque" (for the userinfo endpoint, no audience),
//          "endSession": true,
//          "users": [{"username", "password", "email", "name", "groups": [], "roles": []}]}
// SIGHUP reads CONFIG again (key rotation, changed users) and keeps sessions and grants; every
// request is logged to stdout, one line each.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { Provider } from 'oidc-provider';

const configPath = process.argv[2];
if (!configPath) {
  console.error('usage: node provider.mjs CONFIG.json');
  process.exit(2);
}

const RESOURCE = 'urn:maas:api';
const html = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function userClaims(user) {
  return {
    sub: user.sub || user.username,
    preferred_username: user.username,
    email: user.email || `${user.username}@example.test`,
    email_verified: true,
    name: user.name || user.username,
    groups: user.groups || [],
    realm_access: { roles: user.roles || [] },
  };
}

// Sessions, grants and tokens, kept outside the Provider object so that they survive a SIGHUP
// rebuild (a key rotation or a changed user must not sign everybody out).
const store = new Map();

function live(key) {
  const entry = store.get(key);
  if (entry && entry.expiresAt <= Date.now()) {
    store.delete(key);
    return undefined;
  }
  return entry?.value;
}

class SharedAdapter {
  constructor(model) { this.model = model; }

  key(id) { return `${this.model}:${id}`; }

  async upsert(id, payload, expiresIn) {
    const expiresAt = expiresIn ? Date.now() + expiresIn * 1000 : Infinity;
    store.set(this.key(id), { value: payload, expiresAt });
    if (payload.grantId) {
      const members = live(`grant:${payload.grantId}`) || [];
      store.set(`grant:${payload.grantId}`, { value: [...members, this.key(id)], expiresAt: Infinity });
    }
    if (payload.uid) store.set(`sessionUid:${payload.uid}`, { value: id, expiresAt });
    if (payload.userCode) store.set(`userCode:${payload.userCode}`, { value: id, expiresAt });
  }

  async find(id) { return live(this.key(id)); }

  async findByUid(uid) {
    const id = live(`sessionUid:${uid}`);
    return id && this.find(id);
  }

  async findByUserCode(userCode) {
    const id = live(`userCode:${userCode}`);
    return id && this.find(id);
  }

  async consume(id) {
    const payload = live(this.key(id));
    if (payload) payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) { store.delete(this.key(id)); }

  async revokeByGrantId(grantId) {
    for (const key of live(`grant:${grantId}`) || []) store.delete(key);
    store.delete(`grant:${grantId}`);
  }
}

function build(config) {
  const users = new Map(config.users.map((u) => [u.sub || u.username, u]));
  const byName = new Map(config.users.map((u) => [u.username, u]));
  const scope = 'openid email profile';
  const opaque = config.accessTokenFormat === 'opaque';
  const provider = new Provider(config.issuer, {
    clients: config.clients.map((c) => ({
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_post',
      ...c,
    })),
    adapter: SharedAdapter,
    jwks: config.jwks,
    pkce: { required: () => true },
    // Keycloak gives a standard-flow client a refresh token bound to the user's SSO session:
    // it stops working when that session ends or the user is disabled.
    async issueRefreshToken(ctx, client) {
      return client.grantTypeAllowed('refresh_token');
    },
    conformIdTokenClaims: false, // like Keycloak: the ID token carries the profile claims
    claims: {
      openid: ['sub', 'groups', 'realm_access'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username'],
    },
    async findAccount(ctx, sub) {
      const user = users.get(sub);
      if (!user) return undefined;
      return { accountId: sub, claims: async () => userClaims(user) };
    },
    // First-party client, like a Keycloak client without consent: grant what it asks for.
    async loadExistingGrant(ctx) {
      const grantId = ctx.oidc.result?.consent?.grantId
        || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) return ctx.oidc.provider.Grant.find(grantId);
      return provider.firstPartyGrant(ctx.oidc.client.clientId, ctx.oidc.session.accountId);
    },
    features: {
      devInteractions: { enabled: false },
      // Keycloak's "OAuth 2.0 Device Authorization Grant": a client that lists the grant type
      // (a public, native one such as maasctl) may use it; oidc-provider's own pages.
      deviceFlow: { enabled: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      rpInitiatedLogout: {
        enabled: config.endSession !== false,
        // Keycloak ends the session without a question when the RP sends id_token_hint.
        async logoutSource(ctx, form) {
          ctx.body = `<!DOCTYPE html><html><head><title>Signing out</title></head><body>
            ${form.replace('</form>', '<input type="hidden" name="logout" value="yes"/></form>')}
            <script nonce="${ctx.oidc?.cspNonce || ''}">document.forms[0].submit()</script>
            <noscript><button form="op.logoutForm" type="submit">Sign out</button></noscript>
            </body></html>`;
        },
      },
      resourceIndicators: {
        enabled: true,
        // Opaque: the token is for userinfo (no resource server), which oidc-provider issues
        // opaque, as many providers do by default.
        defaultResource: async () => (opaque ? undefined : RESOURCE),
        useGrantedResource: async () => true,
        getResourceServerInfo: async () => ({
          scope,
          audience: config.audience || 'maas',
          accessTokenTTL: config.accessTokenTTL || 300,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    async extraTokenClaims(ctx, token) {
      const user = users.get(token.accountId);
      if (!user) return undefined;
      // Keycloak's access tokens carry these with the default scopes.
      const { groups, realm_access, preferred_username, email, email_verified } = userClaims(user);
      return { groups, realm_access, preferred_username, email, email_verified, typ: 'Bearer' };
    },
    ttl: { AccessToken: config.accessTokenTTL || 300, IdToken: 300, Interaction: 600,
      Session: 3600, Grant: 3600, AuthorizationCode: 60, RefreshToken: 3600 },
    cookies: { keys: ['maas-test-provider-cookie-key'] },
    interactions: { url: async (ctx, interaction) => `${new URL(config.issuer).pathname}/login/${interaction.uid}` },
  });
  provider.byName = byName;
  // What a first-party client gets without a consent screen (also the answer to the consent
  // oidc-provider asks for native clients, such as maasctl, whatever the grant).
  provider.firstPartyGrant = async (clientId, accountId) => {
    const grant = new provider.Grant({ clientId, accountId });
    grant.addOIDCScope(scope);
    grant.addOIDCClaims(['groups', 'realm_access', 'preferred_username', 'email', 'name']);
    if (!opaque) grant.addResourceScope(RESOURCE, scope);
    await grant.save();
    return grant;
  };
  // Why a token request failed, in the log (oidc-provider keeps it out of the response).
  provider.on('grant.error', (ctx, err) => {
    process.stdout.write(`grant.error ${err.error}: ${err.error_detail || err.message}\n`);
  });
  return provider;
}

function readConfig() {
  return JSON.parse(readFileSync(configPath, 'utf8'));
}

let config = readConfig();
let provider = build(config);
const mount = new URL(config.issuer).pathname.replace(/\/$/, '');
// Keycloak's endpoint paths, so a realm URL means the same here and there.
const ALIASES = new Map([
  ['/protocol/openid-connect/certs', '/jwks'],
  ['/protocol/openid-connect/auth', '/auth'],
  ['/protocol/openid-connect/token', '/token'],
  ['/protocol/openid-connect/userinfo', '/me'],
  ['/protocol/openid-connect/logout', '/session/end'],
  ['/protocol/openid-connect/token/introspect', '/token/introspection'],
  ['/protocol/openid-connect/revoke', '/token/revocation'],
]);

function loginPage(uid, client, error) {
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><title>Sign in to ${html(config.realm || 'maas')}</title></head>
<body><h1 id="kc-page-title">Sign in to your account</h1>
<p>${html(client)} wants you to sign in.</p>
${error ? `<p id="input-error" role="alert">${html(error)}</p>` : ''}
<form id="kc-form-login" method="post" action="${mount}/login/${html(uid)}">
<label for="username">Username</label><input id="username" name="username" autofocus>
<label for="password">Password</label><input id="password" name="password" type="password">
<button id="kc-login" type="submit">Sign In</button></form></body></html>`;
}

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

async function login(req, res, uid) {
  const current = provider;
  const details = await current.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error('interaction mismatch');
  process.stdout.write(`interaction ${details.prompt.name} ${details.prompt.reasons}\n`);
  if (details.prompt.name === 'consent') { // signed in already: like Keycloak, no question
    const grant = await current.firstPartyGrant(details.params.client_id,
      details.session.accountId);
    await current.interactionFinished(req, res, { consent: { grantId: grant.jti } },
      { mergeWithLastSubmission: true });
    return;
  }
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(loginPage(uid, details.params.client_id));
    return;
  }
  const form = await readForm(req);
  const user = current.byName.get(form.get('username') || '');
  if (!user || user.password !== form.get('password')) {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(loginPage(uid, details.params.client_id, 'Invalid username or password.'));
    return;
  }
  await current.interactionFinished(req, res, { login: { accountId: user.sub || user.username } },
    { mergeWithLastSubmission: false });
}

const server = http.createServer(async (req, res) => {
  process.stdout.write(`${req.method} ${req.url}\n`);
  try {
    const url = new URL(req.url, config.issuer);
    if (!url.pathname.startsWith(`${mount}/`) && url.pathname !== mount) {
      res.writeHead(404).end('not found');
      return;
    }
    let rest = url.pathname.slice(mount.length) || '/';
    const loginMatch = rest.match(/^\/login\/([\w-]+)$/);
    if (loginMatch) {
      await login(req, res, loginMatch[1]);
      return;
    }
    rest = ALIASES.get(rest) || rest;
    req.url = rest + url.search;
    req.originalUrl = mount + req.url; // how oidc-provider learns where it is mounted
    provider.callback()(req, res);
  } catch (err) {
    process.stdout.write(`error ${err}\n`);
    if (!res.headersSent) res.writeHead(400, { 'content-type': 'text/plain' });
    res.end(String(err));
  }
});

process.on('SIGHUP', () => {
  config = readConfig();
  provider = build(config);
  process.stdout.write('reloaded\n');
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));

server.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${config.issuer}\n`);
});
