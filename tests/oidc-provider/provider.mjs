// A real OpenID Connect provider for the OIDC login tests: panva's oidc-provider (the certified
// implementation) with its development login and consent pages, on 127.0.0.1 at a free port.
//
// Clients come from OIDC_CLIENTS (a JSON array of client metadata: client_id, client_secret,
// redirect_uris, optionally id_token_signed_response_alg). Signing keys are made at start: one
// RSA (RS256) and one P-256 (ES256) key. Any login name signs in with any password; its claims
// are derived from the name: email `<name>@example.com`, groups `teamster-admins` for names that
// start with `admin`, and tenant `<prefix>` for names `<prefix>.<rest>`. Prints
// `listening on http://127.0.0.1:PORT` once it serves.
import { generateKeyPairSync } from 'node:crypto';
import http from 'node:http';

import Provider from 'oidc-provider';

function key(type, options, alg, kid) {
  const { privateKey } = generateKeyPairSync(type, options);
  return { ...privateKey.export({ format: 'jwk' }), alg, kid, use: 'sig' };
}

const clients = JSON.parse(process.env.OIDC_CLIENTS ?? '[]').map((client) => ({
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
  ...client,
}));

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    clients,
    jwks: {
      keys: [
        key('rsa', { modulusLength: 2048 }, 'RS256', 'rsa-1'),
        key('ec', { namedCurve: 'P-256' }, 'ES256', 'ec-1'),
      ],
    },
    cookies: { keys: ['teamster-oidc-test-cookie-key'] },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'groups', 'tenant'],
    },
    // The scopes' claims go into the ID token itself (Teamster reads no userinfo).
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true } },
    async findAccount(ctx, id) {
      const tenant = id.includes('.') ? id.split('.')[0] : undefined;
      return {
        accountId: id,
        async claims() {
          return {
            sub: id,
            email: `${id}@example.com`,
            email_verified: true,
            name: id,
            groups: id.startsWith('admin') ? ['teamster-admins'] : ['staff'],
            ...(tenant ? { tenant } : {}),
          };
        },
      };
    },
  });
  provider.on('server_error', (ctx, error) => console.error('server_error', error));
  server.on('request', provider.callback());
  console.log(`listening on ${issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
