// Generated settings for the configuration schema (src/config.ts): for every numeric variable,
// values just outside its range, far outside it, with a fraction, and text that is no number are
// refused by loadConfig with a ConfigError whose problem names that variable, and its bounds are
// not refused as out of range.
//
// The variables and their bounds come from the schema itself (CONFIG_VARIABLES, numberBounds), not
// from a list here, so a new setting is covered without touching this file; a variable is numeric
// when loadConfig reads a small whole number into a number.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES, ConfigError, loadConfig, numberBounds } from '../../src/config.ts';

const SEED = 9_117_003;
const RUNS = 600;

/** The range the schema declares for a plain number, or null (TRUST_PROXY, REDIS_WAIT_REPLICAS take words too). */
function declaredRange(name: string): { min: number; max: number } | null {
  const { min, max } = numberBounds(name);
  return min !== undefined && max !== undefined ? { min, max } : null;
}

type Outcome = { ok: true; value: unknown } | { ok: false; problems: string[] };

function load(name: string, text: string): Outcome {
  try {
    return { ok: true, value: (loadConfig({ [name]: text }) as unknown as Record<string, unknown>)[name] };
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return { ok: false, problems: err.problems };
  }
}

const DEFAULTS = loadConfig({}) as unknown as Record<string, unknown>;

/**
 * Whether loadConfig reads `name` as a number: its default is one, or some whole number loads as
 * one (a setting with no default; another rule may refuse small ones, so several are tried).
 */
const isNumeric = (name: string) => typeof DEFAULTS[name] === 'number' || ['1', '5', '60', '100', '1000', '3600', '86400', '2592000'].some((text) => {
  const outcome = load(name, text);
  return outcome.ok && typeof outcome.value === 'number';
});

const NUMERIC = CONFIG_VARIABLES.filter(isNumeric);
/** Numeric variables that also take words (REDIS_WAIT_REPLICAS=auto, TRUST_PROXY=loopback). */
const ALSO_WORDS = NUMERIC.filter((name) => declaredRange(name) === null);
const RANGES = new Map(NUMERIC.flatMap((name) => {
  const range = declaredRange(name);
  return range ? [[name, range] as const] : [];
}));

const refusedNaming = (name: string, outcome: Outcome) => !outcome.ok && outcome.problems.some((p) => p.startsWith(`${name}: `));
const refusedAsRange = (name: string, outcome: Outcome) => !outcome.ok && outcome.problems.some((p) => p.startsWith(`${name}: must be a whole number`));

// ---- values that are not in range -----------------------------------------------------------------

function outOfRange(range: { min: number; max: number }): fc.Arbitrary<string> {
  return fc.oneof(
    fc.constantFrom(String(range.min - 1), String(range.max + 1), '1e400', '-1e400', `${'9'.repeat(30)}`, `-${'9'.repeat(30)}`),
    fc.integer({ min: 1, max: 1_000_000_000 }).map((d) => String(range.min - d)),
    fc.integer({ min: 1, max: 1_000_000_000 }).map((d) => String(range.max + d)),
    fc.integer({ min: 1, max: 9 }).map((d) => ` ${range.max + d} `),
  );
}

/** Numbers with a fraction that is not zero, inside the range or not. */
const nonInteger = (range: { min: number; max: number } | undefined) => fc.tuple(
  fc.integer({ min: range ? range.min : 0, max: range ? Math.max(range.min, range.max - 1) : 1000 }),
  fc.integer({ min: 1, max: 999 }),
).map(([whole, fraction]) => `${whole}.${String(fraction).padStart(3, '0')}`);

/** Text JavaScript reads as no number at all (Number() is NaN), with the usual near-misses named. */
const nonNumber = fc.oneof(
  fc.constantFrom('abc', 'ten', '1,000', '1_000', '80px', 'NaN', 'true', '--1', '1e', '.', '-', '1..2', '0x', '١٢', '５', 'Infinity5', '1 2'),
  fc.string({ minLength: 1, maxLength: 8 }).filter((s) => s.trim() !== '' && Number.isNaN(Number(s))),
);

describe('the configuration schema on generated settings', () => {
  it('reads every setting loadConfig returns from the schema, and finds its numeric ones with their ranges', () => {
    const returned = Object.keys(DEFAULTS).filter((k) => /^[A-Z][A-Z0-9_]*$/.test(k));
    for (const name of returned) expect(CONFIG_VARIABLES, `${name} is a member of the schema`).toContain(name);
    // A numeric setting with no default is found too.
    expect(NUMERIC).toContain('METRICS_PORT');
    // Every purely numeric setting declares a range, and loadConfig's message states that range.
    for (const name of NUMERIC.filter((n) => !ALSO_WORDS.includes(n))) {
      const range = RANGES.get(name);
      expect(range, `${name} declares its range`).toBeDefined();
      const outcome = load(name, 'not-a-number');
      expect(refusedNaming(name, outcome), name).toBe(true);
      if (!outcome.ok) expect(outcome.problems.join('\n')).toContain(`${name}: must be a whole number from ${range!.min} to ${range!.max}`);
    }
  });

  it('a value just or far outside a numeric setting\'s range is refused with a message naming the variable', () => {
    const ranged = [...RANGES.keys()];
    fc.assert(fc.property(fc.constantFrom(...ranged).chain((name) => fc.tuple(fc.constant(name), outOfRange(RANGES.get(name)!))), ([name, text]) => {
      const outcome = load(name, text);
      expect(refusedNaming(name, outcome), `${name}=${JSON.stringify(text)}: ${JSON.stringify(outcome)}`).toBe(true);
    }), { seed: SEED, numRuns: RUNS });
  });

  it('a number with a fraction is refused for every numeric setting, naming the variable', () => {
    fc.assert(fc.property(fc.constantFrom(...NUMERIC).chain((name) => fc.tuple(fc.constant(name), nonInteger(RANGES.get(name)))), ([name, text]) => {
      expect(refusedNaming(name, load(name, text)), `${name}=${text}`).toBe(true);
    }), { seed: SEED + 1, numRuns: RUNS });
  });

  it('text that is no number is refused for every purely numeric setting, naming the variable', () => {
    const purely = NUMERIC.filter((n) => !ALSO_WORDS.includes(n));
    fc.assert(fc.property(fc.constantFrom(...purely), nonNumber, (name, text) => {
      expect(refusedNaming(name, load(name, text)), `${name}=${JSON.stringify(text)}`).toBe(true);
    }), { seed: SEED + 2, numRuns: RUNS });
  });

  it('the bounds themselves are never refused as out of range', () => {
    for (const [name, range] of RANGES) {
      for (const text of [String(range.min), String(range.max)]) {
        // Another rule may still refuse it (SESSION_IDLE_SECONDS may not exceed SESSION_MAX_SECONDS),
        // but not the range.
        expect(refusedAsRange(name, load(name, text)), `${name}=${text}`).toBe(false);
      }
    }
  });

  // A blank value is not an unset one: loadConfig treats "" as unset, but z.coerce.number() would
  // read " " as 0, so PORT=" " would listen on a random port, KEY_CACHE_MAX_ENTRIES=" " turn the key
  // cache off and HTTP_MAX_REQUESTS_PER_SOCKET=" " or REDIS_WAIT_REPLICAS=" " lift a limit.
  it('a blank value (spaces only) of a numeric setting is refused, not read as 0', () => {
    for (const name of NUMERIC) expect(load(name, ' '), name).not.toMatchObject({ ok: true, value: 0 });
  });
});
