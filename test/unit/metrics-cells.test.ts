// The request-path metric families (src/metrics/cells.ts) write the same exposition as
// prom-client's own Counter and Histogram, and add up across cluster workers the same way.
import { AggregatorRegistry, Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { CounterFamily, HistogramFamily } from '../../src/metrics/cells.ts';

const sorted = (text: string) => text.split('\n').filter((l) => l !== '').sort();

describe('metric cells', () => {
  it('a histogram family writes the buckets, sum and count prom-client writes for the same observations', async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const family = new HistogramFamily(ours, { name: 'x_seconds', help: 'x', labelNames: ['route'], buckets: [0.01, 0.1, 1] });
    const reference = new Histogram({ name: 'x_seconds', help: 'x', labelNames: ['route'], buckets: [0.01, 0.1, 1], registers: [theirs] });
    for (const [route, value] of [['/a', 0.005], ['/a', 0.01], ['/a', 0.5], ['/a', 7], ['/b', 0.05]] as const) {
      family.cell(route).observe(value);
      reference.observe({ route }, value);
    }
    // The same samples; prom-client writes `le` first, we write it last.
    const normalise = (text: string) => sorted(text).map((l) => l.replace(/\{le="([^"]+)",route="([^"]+)"\}/, '{route="$2",le="$1"}')).sort();
    expect(normalise(await ours.metrics())).toEqual(normalise(await theirs.metrics()));
  });

  it('a counter family writes one sample per label set, and cells are found again by their values', async () => {
    const registry = new Registry();
    const family = new CounterFamily(registry, { name: 'y_total', help: 'y', labelNames: ['method', 'status'] });
    family.cell('GET', '200').inc();
    family.cell('GET', '200').inc(2);
    family.cell('POST', '403').inc();
    const reference = new Registry();
    const counter = new Counter({ name: 'y_total', help: 'y', labelNames: ['method', 'status'], registers: [reference] });
    counter.inc({ method: 'GET', status: '200' }, 3);
    counter.inc({ method: 'POST', status: '403' });
    expect(sorted(await registry.metrics())).toEqual(sorted(await reference.metrics()));
  });

  it('families of several workers add up as prom-client metrics do in a cluster', async () => {
    const workers = [new Registry(), new Registry()];
    workers.forEach((registry, i) => {
      new CounterFamily(registry, { name: 'z_total', help: 'z', labelNames: ['route'] }).cell('/a').inc(i + 1);
      new HistogramFamily(registry, { name: 'z_seconds', help: 'z', labelNames: ['route'], buckets: [1] }).cell('/a').observe(0.5 + i);
    });
    const aggregated = AggregatorRegistry.aggregate(await Promise.all(workers.map((r) => r.getMetricsAsJSON())));
    const text = await aggregated.metrics();
    expect(text).toMatch(/^z_total\{route="\/a"\} 3$/m);
    expect(text).toMatch(/^z_seconds_bucket\{route="\/a",le="1"\} 1$/m);
    expect(text).toMatch(/^z_seconds_bucket\{route="\/a",le="\+Inf"\} 2$/m);
    expect(text).toMatch(/^z_seconds_sum\{route="\/a"\} 2$/m);
  });
});
