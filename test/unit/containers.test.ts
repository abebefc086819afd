// No Docker engine runs on CI machines, so the container files are checked for what makes them
// work (issue 17 point 8): the image runs as a non-root user with a health check, copies only what
// exists, and compose mounts the policy and plugin directories where agentgate reads them, with
// settings agentgate's own config schema accepts.
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config.ts';

interface Instruction {
  keyword: string;
  args: string;
}

/** The Dockerfile's instructions, with comments dropped and continuation lines joined. */
function dockerfile(): Instruction[] {
  const joined = readFileSync('Dockerfile', 'utf8').split('\n').filter((line) => !line.trimStart().startsWith('#')).join('\n').replace(/\\\n/g, ' ');
  return joined.split('\n').map((line) => line.trim()).filter(Boolean).map((line) => {
    const [keyword, ...rest] = line.split(/\s+/);
    return { keyword: keyword!.toUpperCase(), args: rest.join(' ') };
  });
}

type Service = {
  build?: string;
  image?: string;
  command?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
};
const compose = parse(readFileSync('docker-compose.yml', 'utf8')) as { services: Record<string, Service>; volumes?: Record<string, unknown> };

describe('Dockerfile', () => {
  const instructions = dockerfile();
  const last = (keyword: string) => instructions.filter((i) => i.keyword === keyword).at(-1);

  it('builds on Node 24 and runs the sources with it', () => {
    expect(instructions[0]).toMatchObject({ keyword: 'FROM' });
    expect(instructions[0]!.args).toMatch(/^node:24[-.\w]*$/);
    expect(last('CMD')!.args).toBe('["node", "src/main.ts"]');
  });

  it('runs as a non-root user from before the command', () => {
    const userIndex = instructions.findLastIndex((i) => i.keyword === 'USER');
    expect(userIndex).toBeGreaterThan(-1);
    expect(instructions[userIndex]!.args).not.toMatch(/^(root|0)(:|$)/);
    expect(userIndex).toBeLessThan(instructions.findLastIndex((i) => i.keyword === 'CMD'));
    // Nothing after USER may switch back.
    expect(instructions.slice(userIndex + 1).some((i) => i.keyword === 'USER')).toBe(false);
  });

  it('has a health check on /healthz, the liveness endpoint', () => {
    expect(last('HEALTHCHECK')!.args).toMatch(/\/healthz/);
  });

  it('copies only paths that exist, installs without dev dependencies, and exposes the port it listens on', () => {
    for (const copy of instructions.filter((i) => i.keyword === 'COPY')) {
      const sources = copy.args.split(/\s+/).slice(0, -1);
      for (const source of sources) expect(existsSync(source), `COPY ${source}`).toBe(true);
    }
    expect(instructions.some((i) => i.keyword === 'RUN' && /npm ci .*--omit=dev/.test(i.args))).toBe(true);
    const port = /PORT=(\d+)/.exec(instructions.filter((i) => i.keyword === 'ENV').map((i) => i.args).join(' '))?.[1];
    expect(last('EXPOSE')!.args).toBe(port);
  });

  it('keeps secrets and local state out of the build context', () => {
    const ignored = readFileSync('.dockerignore', 'utf8').split('\n');
    for (const entry of ['node_modules', '.git', '*.private.jwk.json', '.env']) expect(ignored).toContain(entry);
  });
});

describe('docker-compose.yml', () => {
  const agentgate = compose.services.agentgate!;
  const redis = compose.services.redis!;

  it('builds agentgate from this Dockerfile and waits for a healthy Redis that never evicts', () => {
    expect(agentgate.build).toBe('.');
    expect(agentgate.depends_on?.redis?.condition).toBe('service_healthy');
    expect(redis.command).toEqual(expect.arrayContaining(['--maxmemory-policy', 'noeviction', '--appendonly']));
    expect(redis.healthcheck?.test).toBeDefined();
  });

  it('mounts the policy and plugin directories read-only where agentgate reads them, so a rebuilt artefact reloads live', () => {
    const mounts = (agentgate.volumes ?? []).map((v) => v.split(':'));
    const config = loadConfig({ ...agentgate.environment, ADMIN_TOKEN: 'a-token-of-sixteen-chars', ISSUER: 'http://localhost:3000' });
    for (const [source, readsAt] of [['./policies', `/app/${config.POLICY_WASM_PATH}`], ['./plugins', `/app/${config.PLUGINS_DIR}`]] as const) {
      const mount = mounts.find(([from]) => from === source);
      expect(mount, `a mount of ${source}`).toBeDefined();
      expect(mount![2]).toBe('ro');
      expect(existsSync(source)).toBe(true);
      expect(readsAt.startsWith(mount![1]!)).toBe(true);
    }
    expect(config.POLICY_WATCH).toBe(true);
  });

  it('passes only settings agentgate accepts, requires ADMIN_TOKEN, and probes readiness', () => {
    const environment = agentgate.environment ?? {};
    expect(environment.ADMIN_TOKEN).toMatch(/^\$\{ADMIN_TOKEN:\?/);
    expect(environment.REDIS_URL).toBe('redis://redis:6379');
    // The schema refuses unknown values; with the placeholders filled in, the settings must load.
    expect(() => loadConfig({ ...environment, ADMIN_TOKEN: 'a-token-of-sixteen-chars', ISSUER: 'http://localhost:3000' })).not.toThrow();
    expect(agentgate.healthcheck?.test.join(' ')).toMatch(/\/readyz/);
    expect(agentgate.ports).toEqual([`${environment.PORT}:${environment.PORT}`]);
  });
});
