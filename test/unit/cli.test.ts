// The command-line tool's pure parts (src/cli/): argument parsing, terminal-safe output, and the
// JWT claims it signs, checked against the server's own rules (src/auth/jwt.ts).
import { generateKeyPair, exportJWK } from 'jose';
import { describe, expect, it } from 'vitest';
import { checkAudience, checkTimeAndJti, decodeJwt } from '../../src/auth/jwt.ts';
import { parseCommandLine } from '../../src/cli/args.ts';
import { COMMANDS } from '../../src/cli/commands/index.ts';
import { requestedCapabilities } from '../../src/cli/commands/register.ts';
import { UsageError } from '../../src/cli/errors.ts';
import { globalSettings } from '../../src/cli/globals.ts';
import { keyValues, safe, table } from '../../src/cli/output.ts';
import { agentClaims, hostRegistrationClaims, signJwt } from '../../src/cli/tokens.ts';

const run = (argv: string[]) => {
  const parsed = parseCommandLine(argv, COMMANDS);
  if (parsed.kind !== 'run') throw new Error('expected a command');
  return parsed;
};

describe('argument parsing', () => {
  it('finds the command after global options and reads its options and arguments', () => {
    const parsed = run(['--url', 'http://x:1', 'agents', 'approve', 'agt_1', '--capability', 'a', '--capability', 'b', '--json']);
    expect(parsed.command.words).toEqual(['agents', 'approve']);
    expect(parsed.args).toEqual({ ID: 'agt_1' });
    expect(parsed.values).toMatchObject({ url: 'http://x:1', capability: ['a', 'b'], json: true });
  });

  it('refuses what it does not know, and what is missing, as usage errors', () => {
    expect(() => run(['nope'])).toThrow(UsageError);
    expect(() => run(['hosts', 'nope'])).toThrow('unknown command "hosts nope"');
    expect(() => run(['hosts', 'show'])).toThrow('missing ID');
    expect(() => run(['hosts', 'show', 'a', 'b'])).toThrow('unexpected argument "b"');
    expect(() => run(['hosts', 'show', 'a', '--capability', 'x'])).toThrow(UsageError);
    expect(() => run(['register', '--name', 'x'])).toThrow('--host-key is required');
    expect(() => run(['policy', 'status', '--json=yes'])).toThrow(UsageError);
  });

  it('answers help for the tool, a group and a command', () => {
    expect(parseCommandLine(['--help'], COMMANDS)).toMatchObject({ kind: 'help', text: expect.stringContaining('usage: agentgate <command>') });
    expect(parseCommandLine(['agents', '-h'], COMMANDS)).toMatchObject({ kind: 'help', text: expect.stringContaining('agents revoke') });
    expect(parseCommandLine(['execute', '--help'], COMMANDS)).toMatchObject({ kind: 'help', text: expect.stringContaining('--agent-key FILE') });
  });

  it('takes the server, token and timeout from options first, then the environment', () => {
    expect(globalSettings({}, {})).toEqual({ baseUrl: new URL('http://127.0.0.1:3000'), adminToken: undefined, timeoutMs: 10_000 });
    expect(globalSettings({}, { AGENTGATE_URL: 'https://ag.example', AGENTGATE_ADMIN_TOKEN: 'a', ADMIN_TOKEN: 'b' })).toMatchObject({ adminToken: 'a' });
    expect(globalSettings({}, { ADMIN_TOKEN: 'b' }).adminToken).toBe('b');
    expect(globalSettings({ 'admin-token': 'c', 'timeout-ms': '50' }, { ADMIN_TOKEN: 'b' })).toMatchObject({ adminToken: 'c', timeoutMs: 50 });
    expect(() => globalSettings({ url: 'http://user:pw@x' }, {})).toThrow(UsageError);
    expect(() => globalSettings({ 'timeout-ms': '0' }, {})).toThrow(UsageError);
  });

  it('pairs --constraints with the capabilities asked for', () => {
    expect(requestedCapabilities(['a', 'b'], { b: { n: { max: 1 } } })).toEqual(['a', { name: 'b', constraints: { n: { max: 1 } } }]);
    expect(() => requestedCapabilities(['a'], { b: {} })).toThrow(UsageError);
    expect(() => requestedCapabilities(['a'], { a: 5 })).toThrow(UsageError);
  });
});

describe('output', () => {
  it('shows control characters and bidi overrides instead of obeying them', () => {
    expect(safe('a\u001b[2Jb\u202ec\n')).toBe('a\\u{1b}[2Jb\\u{202e}c\\u{a}');
    expect(safe({ k: 1 })).toBe('{"k":1}');
  });

  it('aligns tables and key-value lines', () => {
    expect(table(['id', 'name'], [['a', 'long name'], ['bbb', undefined]])).toBe('ID   NAME\na    long name\nbbb\n');
    expect(keyValues([['id', 'x'], ['skipped', undefined], ['longer', 2]])).toBe('id      x\nlonger  2\n');
  });
});

describe('the tokens the tool signs pass the server\'s claim rules', () => {
  const now = 1_900_000_000;
  const rules = { nowSeconds: now, maxLifetimeSeconds: 60, skewSeconds: 30 };

  it('a host registration token: typ host+jwt, iss the thumbprint, aud the issuer, both keys', async () => {
    const pair = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
    const jwk = { kty: 'OKP', crv: 'Ed25519', x: (await exportJWK(pair.publicKey)).x! } as const;
    const claims = hostRegistrationClaims({ hostThumbprint: 't'.repeat(43), issuer: 'http://ag', hostPublicJwk: jwk, agentPublicJwk: jwk, nowSeconds: now, jti: 'j1' });
    const decoded = decodeJwt(await signJwt(claims, 'host+jwt', pair.privateKey, 'EdDSA'), 'host+jwt');
    expect(decoded.header).toEqual({ alg: 'EdDSA', typ: 'host+jwt' });
    expect(decoded.claims).toEqual({ iss: 't'.repeat(43), aud: 'http://ag', iat: now, exp: now + 60, jti: 'j1', host_public_key: jwk, agent_public_key: jwk });
    expect(checkTimeAndJti(decoded.claims, rules)).toEqual({ jti: 'j1', exp: now + 60, iat: now });
    expect(() => checkAudience(decoded.claims, ['http://ag'])).not.toThrow();
  });

  it('an agent token: typ agent+jwt, sub the agent, aud the execute location, iss only when the host is named', async () => {
    const pair = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
    const claims = agentClaims({ agentId: 'agt_1', audience: 'http://ag/capability/execute', nowSeconds: now, jti: 'j2' });
    expect(claims).not.toHaveProperty('iss');
    const decoded = decodeJwt(await signJwt(claims, 'agent+jwt', pair.privateKey, 'EdDSA'), 'agent+jwt');
    expect(decoded.claims).toEqual({ sub: 'agt_1', aud: 'http://ag/capability/execute', iat: now, exp: now + 60, jti: 'j2' });
    expect(() => checkTimeAndJti(decoded.claims, rules)).not.toThrow();
    expect(agentClaims({ agentId: 'agt_1', audience: 'a', hostThumbprint: 'h', nowSeconds: now, jti: 'j' }).iss).toBe('h');
  });
});
