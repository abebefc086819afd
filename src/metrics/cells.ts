// Counter and histogram families for the metrics recorded on every request. prom-client's own
// Counter and Histogram validate and hash their labels on every increment; measured in a profile
// of the execute benchmark, the six updates of one execute cost about 1.6 % of the
// server's CPU that way. Here a family finds a series' cell by its label values once and then
// updates numbers in place; prom-client still does everything else: the registry, the text
// exposition and the aggregation of cluster workers, which read the families through the same
// `get()` its own metrics answer.
import type { Metric, Registry } from 'prom-client';

/** One sample as prom-client's registry and aggregator read it. */
interface Sample {
  labels: Record<string, string | number>;
  value: number;
  metricName?: string;
}

interface FamilyOptions<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
}

abstract class Family<L extends string, Cell> {
  readonly name: string;
  readonly help: string;
  abstract readonly type: 'counter' | 'histogram';
  /** Cluster workers' series are added up. */
  readonly aggregator = 'sum';
  readonly #labelNames: readonly L[];
  readonly #series = new Map<string, { labels: Record<L, string>; cell: Cell }>();

  constructor(registry: Registry, options: FamilyOptions<L>) {
    this.name = options.name;
    this.help = options.help;
    this.#labelNames = options.labelNames;
    // The registry takes any object with a name and get(); prom-client's type lists only its classes.
    registry.registerMetric(this as unknown as Metric);
  }

  /** The cell of the series with these label values, in labelNames order (made on first use). */
  cell(...values: string[]): Cell {
    // Joined by hand for the usual one to three labels: this runs on every request.
    const key = values.length === 1 ? values[0]! : values.length === 2 ? `${values[0]}\u0000${values[1]}` : values.length === 3 ? `${values[0]}\u0000${values[1]}\u0000${values[2]}` : values.join('\u0000');
    let series = this.#series.get(key);
    if (series === undefined) {
      const labels = Object.fromEntries(this.#labelNames.map((name, i) => [name, values[i] ?? ''])) as Record<L, string>;
      series = { labels, cell: this.newCell() };
      this.#series.set(key, series);
    }
    return series.cell;
  }

  protected abstract newCell(): Cell;
  protected abstract samplesOf(labels: Record<L, string>, cell: Cell): Sample[];

  /** What prom-client's registry reads to write the exposition (and to aggregate workers). */
  async get(): Promise<{ name: string; help: string; type: string; values: Sample[]; aggregator: string }> {
    const values: Sample[] = [];
    for (const { labels, cell } of this.#series.values()) values.push(...this.samplesOf(labels, cell));
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
}

export class CounterCell {
  value = 0;
  inc(by = 1): void {
    this.value += by;
  }
}

export class CounterFamily<L extends string> extends Family<L, CounterCell> {
  readonly type = 'counter';
  protected newCell(): CounterCell {
    return new CounterCell();
  }
  protected samplesOf(labels: Record<L, string>, cell: CounterCell): Sample[] {
    return [{ labels, value: cell.value }];
  }
}

class HistogramCell {
  /** Observations per bucket, not cumulative; the last slot counts those above every bound. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  readonly #bounds: readonly number[];

  constructor(bounds: readonly number[]) {
    this.#bounds = bounds;
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    let i = 0;
    while (i < this.#bounds.length && value > this.#bounds[i]!) i++;
    this.counts[i]! += 1;
    this.sum += value;
    this.count += 1;
  }
}

export class HistogramFamily<L extends string> extends Family<L, HistogramCell> {
  readonly type = 'histogram';
  readonly #bounds: readonly number[];

  constructor(registry: Registry, options: FamilyOptions<L> & { buckets: readonly number[] }) {
    super(registry, options);
    this.#bounds = [...options.buckets].sort((a, b) => a - b);
  }

  protected newCell(): HistogramCell {
    return new HistogramCell(this.#bounds);
  }

  protected samplesOf(labels: Record<L, string>, cell: HistogramCell): Sample[] {
    const samples: Sample[] = [];
    let cumulative = 0;
    this.#bounds.forEach((bound, i) => {
      cumulative += cell.counts[i]!;
      samples.push({ labels: { ...labels, le: bound }, value: cumulative, metricName: `${this.name}_bucket` });
    });
    samples.push(
      { labels: { ...labels, le: '+Inf' }, value: cell.count, metricName: `${this.name}_bucket` },
      { labels, value: cell.sum, metricName: `${this.name}_sum` },
      { labels, value: cell.count, metricName: `${this.name}_count` },
    );
    return samples;
  }
}
