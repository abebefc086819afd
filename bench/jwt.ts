// Pre-signing agent JWTs for the load generator with node:crypto directly: signing must happen
// before the timed window, and fast, so the generator never becomes the bottleneck.
import { randomUUID, sign, type KeyObject } from 'node:crypto';

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
const HEADER = b64({ alg: 'EdDSA', typ: 'agent+jwt' });

export interface BenchAgent {
  id: string;
  privateKey: KeyObject;
  hostThumbprint: string;
}

export function presign(agents: BenchAgent[], count: number, aud: string): string[] {
  const tokens: string[] = new Array(count);
  const iat = Math.floor(Date.now() / 1000);
  for (let i = 0; i < count; i++) {
    const agent = agents[i % agents.length]!;
    const input = `${HEADER}.${b64({ iss: agent.hostThumbprint, sub: agent.id, aud, iat, exp: iat + 60, jti: randomUUID() })}`;
    tokens[i] = `${input}.${sign(null, Buffer.from(input), agent.privateKey).toString('base64url')}`;
  }
  return tokens;
}
