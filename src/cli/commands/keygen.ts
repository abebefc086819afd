// `agentgate keygen`: a new Ed25519 key pair for a host or an agent, as two JWK files.
import { mkdir, unlink } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { printLocal, stringOption, type CommandSpec } from '../command.ts';
import { UsageError } from '../errors.ts';
import { generateEd25519, writeNewFile } from '../keys.ts';
import { keyValues } from '../output.ts';

/** A file name stem: no directories, no hidden files, nothing a shell would trip over. */
const KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export const keygenCommand: CommandSpec = {
  words: ['keygen'],
  summary: 'Create an Ed25519 key pair as JWK files and print its RFC 7638 thumbprint',
  details: 'Writes <name>.private.jwk.json (mode 0600) and <name>.public.jwk.json, and never overwrites a file. '
    + "The thumbprint is a host's identity on the wire (the `iss` of its JWTs). The private key is never printed.",
  args: [],
  options: {
    out: { type: 'string', valueName: 'DIR', description: 'the directory to write to (default: the current one; created if missing)' },
    name: { type: 'string', valueName: 'NAME', description: 'the files\' name stem (default: agentgate)' },
  },
  admin: false,
  examples: ['agentgate keygen --name host', 'agentgate keygen --out ~/.agentgate --name agent-1'],
  async run(ctx) {
    const name = stringOption(ctx.values, 'name') ?? 'agentgate';
    if (!KEY_NAME.test(name)) throw new UsageError('--name must be 1-64 letters, digits, ".", "_" or "-", starting with a letter or digit');
    const dir = resolve(ctx.cwd, stringOption(ctx.values, 'out') ?? '.');
    try {
      await mkdir(dir, { recursive: true, mode: 0o700 });
    } catch (err) {
      throw new UsageError(`cannot create ${dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    const pair = await generateEd25519();
    const privatePath = join(dir, `${name}.private.jwk.json`);
    const publicPath = join(dir, `${name}.public.jwk.json`);
    await writeNewFile(privatePath, `${JSON.stringify(pair.privateJwk, null, 2)}\n`, 0o600);
    try {
      await writeNewFile(publicPath, `${JSON.stringify(pair.publicJwk, null, 2)}\n`, 0o644);
    } catch (err) {
      // Half a pair is no use to anyone; the private file was created by this run, so it goes.
      await unlink(privatePath).catch(() => undefined);
      throw err;
    }
    printLocal(
      ctx,
      { thumbprint: pair.thumbprint, private_key_file: privatePath, public_key_file: publicPath, public_key: pair.publicJwk },
      keyValues([['thumbprint', pair.thumbprint], ['private key', `${privatePath} (mode 0600; keep it secret)`], ['public key', publicPath]]),
    );
  },
};
