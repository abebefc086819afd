// The benchmark's floor: the least work any implementation of the protocol must do per
// execute on this stack. Bare Express 5 with express.json(), plus one Ed25519 verification of the
// request's fresh agent JWT with the fastest verifier agentgate ships, answering `{data}`. It finds
// the key by the token's `sub` (so it decodes the payload, as any verifier must) and checks nothing
// else: no claims, no replay, no lifecycle, no grants. agentgate's execute is reported as a ratio
// of this, measured in the same run.
//
// FLOOR_KEYS: a JSON object from agent id to the base64url Ed25519 public key (`x` of its JWK).
import express from 'express';
import { chooseEd25519Verifier, type Ed25519PublicKey } from '../src/auth/ed25519-verify.ts';

const { verifier } = chooseEd25519Verifier('auto');
const keys = new Map<string, Ed25519PublicKey>();
for (const [agentId, x] of Object.entries(JSON.parse(process.env.FLOOR_KEYS ?? '{}') as Record<string, string>)) {
  const key = verifier.prepare(Buffer.from(x, 'base64url'));
  if (!key) throw new Error(`FLOOR_KEYS: ${agentId} has no usable Ed25519 key`);
  keys.set(agentId, key);
}

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.use(express.json({ limit: 65_536 }));
app.post('/capability/execute', (req, res) => {
  const token = (req.headers.authorization ?? '').slice('Bearer '.length);
  const lastDot = token.lastIndexOf('.');
  const firstDot = token.indexOf('.');
  let sub: unknown;
  try {
    sub = (JSON.parse(Buffer.from(token.slice(firstDot + 1, lastDot), 'base64url').toString('utf8')) as { sub?: unknown }).sub;
  } catch {
    sub = undefined;
  }
  const key = typeof sub === 'string' ? keys.get(sub) : undefined;
  if (!key || !key.verify(Buffer.from(token.slice(0, lastDot), 'latin1'), Buffer.from(token.slice(lastDot + 1), 'base64url'))) {
    res.status(401).json({ error: 'invalid_jwt', message: 'signature verification failed' });
    return;
  }
  res.json({ data: req.body as unknown });
});
const port = Number(process.env.PORT ?? 0);
const server = app.listen(port, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`${JSON.stringify({ listening: typeof address === 'object' && address ? address.port : port, verifier: verifier.backend })}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
