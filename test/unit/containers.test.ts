// No Docker engine runs on CI machines, so the container files are checked for what makes them
// work: the image runs as a non-root user with a health check, copies only what
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
  profiles?: string[];
};
// Merge keys (`<<: *agentgate`) as Docker Compose reads them.
const compose = parse(readFileSync('docker-compose.yml', 'utf8'), { merge: true }) as { services: Record<string, Service>; volumes?: Record<string, unknown> };

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

describe('docker-compose.yml profiles: the other Redis topologies (README "Redis topologies")', () => {
  const services = compose.services;
  // The placeholders filled in, as the default service's test does.
  const settingsOf = (name: string) => loadConfig({ ...services[name]!.environment, ADMIN_TOKEN: 'a-token-of-sixteen-chars', ISSUER: 'http://localhost:3001' });
  const serviceName = (address: string) => address.split(':')[0]!;

  it('the sentinel profile runs agentgate on the sentinels it starts, which watch a master that has a replica', () => {
    const topology = settingsOf('agentgate-sentinel').redis;
    expect(topology?.kind).toBe('sentinel');
    if (topology?.kind !== 'sentinel') return;
    for (const sentinel of topology.sentinels) {
      const started = services[serviceName(sentinel.host)];
      expect(started?.profiles, sentinel.host).toEqual(['sentinel']);
      expect(String(started?.command)).toContain(`sentinel monitor ${topology.masterName} redis-primary 6379 2`);
    }
    expect(services['redis-replica']!.command).toEqual(expect.arrayContaining(['--replicaof', 'redis-primary']));
    for (const node of ['redis-primary', 'redis-replica']) expect(services[node]!.command).toEqual(expect.arrayContaining(['--maxmemory-policy', 'noeviction', '--appendonly']));
  });

  it('the cluster profile runs agentgate on seed nodes it starts, six cluster nodes joined with a replica per master', () => {
    const topology = settingsOf('agentgate-cluster').redis;
    expect(topology?.kind).toBe('cluster');
    if (topology?.kind !== 'cluster') return;
    for (const node of topology.nodes) expect(services[serviceName(node.host)]?.profiles, node.host).toEqual(['cluster']);
    const nodes = Object.keys(services).filter((name) => /^redis-node-\d$/.test(name));
    expect(nodes).toHaveLength(6);
    for (const node of nodes) expect(services[node]!.command).toEqual(expect.arrayContaining(['--cluster-enabled', 'yes', '--maxmemory-policy', 'noeviction']));
    // Without it, one master's loss stops every command of the cluster (README "Redis topologies").
    for (const node of nodes) expect(services[node]!.command!.join(' ')).toContain('--cluster-require-full-coverage no');
    expect(String(services['redis-cluster-create']!.command)).toContain('--cluster-replicas 1');
  });

  it('each profile\'s agentgate is built like the default one, on a port of its own', () => {
    const ports = ['agentgate', 'agentgate-sentinel', 'agentgate-cluster'].map((name) => {
      expect(services[name]!.build).toBe('.');
      expect(services[name]!.healthcheck?.test.join(' ')).toMatch(/\/readyz/);
      return services[name]!.ports?.[0]?.split(':')[0];
    });
    expect(new Set(ports).size).toBe(3);
  });
});
