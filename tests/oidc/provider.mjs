// A real OpenID provider for the sign-in tests: panva's oidc-provider (OpenID Certified), on loopback.
//
// The tests start it with: CLIENT_ID, CLIENT_SECRET, REDIRECT_URIS (comma-separated) and ACCOUNTS_FILE,
// a JSON object {username: {password, claims: {...}}} read again at every look-up, so a test changes a user's
// groups or removes the user by rewriting the file. PKCE (S256) is required of the client. It listens on a port
// the system picks (no other process can take it between a choice and a bind) and prints "listening <issuer>"
// once it serves requests.
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';

import Provider, { interactionPolicy } from 'oidc-provider';

const server = http.createServer((req, res) => route(req, res));
await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
const issuer = `http://127.0.0.1:${server.address().port}`;
const accountsFile = process.env.ACCOUNTS_FILE;
const accounts = () => JSON.parse(fs.readFileSync(accountsFile, 'utf8'));

const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key', alg: 'RS256', use: 'sig' };

// A browser session at the provider whose account was since deleted asks for a new login (the account is
// gone, so that login fails), as a provider that ends the sessions of deleted accounts would.
const policy = interactionPolicy.base();
policy.get('login').checks.add(new interactionPolicy.Check(
  'account_gone',
  'the signed-in account no longer exists',
  (ctx) => Boolean(ctx.oidc.session.accountId) && !ctx.oidc.account,
));

const provider = new Provider(issuer, {
  clients: [{
    client_id: process.env.CLIENT_ID,
    client_secret: process.env.CLIENT_SECRET,
    redirect_uris: process.env.REDIRECT_URIS.split(','),
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
  }],
  jwks: { keys: [signingKey] },
  pkce: { required: () => true },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'given_name', 'family_name', 'preferred_username'],
    groups: ['groups'],
  },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  features: { devInteractions: { enabled: false } },
  interactions: { policy, url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  // A first-party client: the organisation's own portal is granted what it asks for without a consent page.
  loadExistingGrant: async (ctx) => {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope([...ctx.oidc.requestParamScopes].join(' '));
    await grant.save();
    return grant;
  },
  // Refresh tokens for the portal's checks without asking the user for offline access (as many providers do);
  // they outlive the provider's browser session, and die with the account.
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  expiresWithSession: async () => false,
  findAccount: async (ctx, id) => {
    const account = accounts()[id];
    if (!account) return undefined;
    return { accountId: id, claims: async () => ({ sub: id, ...account.claims }) };
  },
});

provider.on('server_error', (ctx, error) => console.error('server_error', ctx.path, error));

const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginForm(res, uid, error) {
  res.setHeader('content-type', 'text/html; charset=utf-8');
  res.end(`<!doctype html><title>Test identity provider</title>
<h1>Test identity provider</h1>
${error ? `<p role="alert">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
  <label>Username <input name="username" id="idp-username" autocomplete="off"></label>
  <label>Password <input name="password" id="idp-password" type="password"></label>
  <button type="submit">Log in</button>
</form>`);
}

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString());
}

async function interaction(req, res, submitted) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name !== 'login') {
    res.statusCode = 400;
    res.end(`unexpected prompt ${details.prompt.name}`);
    return;
  }
  if (!submitted) {
    loginForm(res, details.uid, '');
    return;
  }
  const form = await body(req);
  const username = form.get('username') || '';
  const account = accounts()[username];
  if (!account || account.password !== form.get('password')) {
    loginForm(res, details.uid, 'Unknown user or wrong password.');
    return;
  }
  await provider.interactionFinished(req, res, { login: { accountId: username } }, { mergeWithLastSubmission: false });
}

const handle = provider.callback();

function route(req, res) {
  const match = new URL(req.url, issuer).pathname.match(/^\/interaction\/[^/]+(\/login)?$/);
  if (!match) {
    handle(req, res);
    return;
  }
  interaction(req, res, Boolean(match[1]) && req.method === 'POST').catch((error) => {
    res.statusCode = 500;
    res.end(String(error));
  });
}

console.log(`listening ${issuer}`);
