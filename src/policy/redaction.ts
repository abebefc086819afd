// Redaction of recorded policy decisions (decision-records.ts): the values an operator names in one
// setting never reach the record. Patterns are comma-separated: a bare name (`password`) matches that
// member at any depth; a dotted pattern (`arguments.ssn`, `arguments.*.iban`, `**.secret`) is a path
// from the document's root, where `*` matches exactly one member name or array index and `**` any
// number of levels, zero included. A matched member keeps its place with the value "[redacted]", so
// a reader sees something was there.
//
// The patterns say where secrets sit in the input; the policy can hand them back anywhere in its
// output and the plugin operators see them as values. So redactDecision also follows the values: an
// execute violation's `actual` and an operator answer's `actual` or `operand` that was an argument's
// or an operand's value in the input become that value as redacted, and anything else the output or
// the answers hold that equals a redacted value (or contains a redacted string of four characters or
// more) becomes "[redacted]" as well.
import { canonicalJson, MAX_JSON_DEPTH, MAX_OPERATOR_ANSWERS, type DecisionEntrypoint, type OperatorAnswer } from './decision-records.ts';

export const REDACTED = '[redacted]';
export const TOO_DEEP = '[too deep]';

const MAX_PATTERNS = 32;
const MAX_SEGMENTS = 16;
const SEGMENT_NAME = /^[A-Za-z0-9_-]+$/;
/** Redacted strings shorter than this are found by equality only: a short one would match inside every reason. */
const MIN_SUBSTRING_LENGTH = 4;
/**
 * Output members every record needs to be read back (decision-records.ts refuses a record without
 * them). A bare name redacts a member at any depth, the output included, so these cannot be one.
 */
const RESERVED_BARE_NAMES: ReadonlySet<string> = new Set(['allow', 'violations', 'decisions', 'decision']);
/** A state of a path pattern's walk: pattern index * STATE_STRIDE + the next segment's position. */
const STATE_STRIDE = MAX_SEGMENTS + 1;
const NO_STATES: readonly number[] = [];

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Sets a member on a fresh object as its own member: plain assignment to __proto__ (a JSON member like any other) would set the prototype. */
function setMember(out: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  else out[key] = value;
}

/** The values a redaction took out of a document, for finding them again elsewhere (redactDecision). */
export interface RedactedValues {
  /** Canonical JSON (decision-records.ts) of every redacted value and of every value inside one. */
  readonly canonical: ReadonlySet<string>;
  /** The redacted strings long enough to look for inside other strings. */
  readonly strings: readonly string[];
}

export interface Redaction {
  /** The patterns as given, trimmed. */
  readonly patterns: readonly string[];
  /** A deep copy of a JSON value with every matched member's value redacted; never mutates or throws. */
  apply(value: unknown): unknown;
  /** As apply, also answering what was redacted. */
  applyCollecting(value: unknown): { value: unknown; redacted: RedactedValues };
}

/**
 * Compiles the redaction setting. Throws an Error naming the bad pattern: an empty pattern or
 * segment, a character outside [A-Za-z0-9_-] in a name, a `*` that is not a whole segment, a pattern
 * without any name (it would redact whole documents), a reserved bare name, more than 32 patterns or
 * more than 16 segments. An empty or blank setting redacts nothing.
 */
export function compileRedaction(setting: string): Redaction {
  if (setting.trim() === '') return new CompiledRedaction([], new Set(), []);
  const patterns = setting.split(',').map((p) => p.trim());
  if (patterns.length > MAX_PATTERNS) throw new Error(`the redaction setting holds ${patterns.length} patterns, more than ${MAX_PATTERNS}`);
  const names = new Set<string>();
  const paths: string[][] = [];
  for (const pattern of patterns) {
    const segments = patternSegments(pattern);
    if (segments.length === 1) names.add(segments[0]!);
    else paths.push(segments);
  }
  return new CompiledRedaction(patterns, names, paths);
}

function patternSegments(pattern: string): string[] {
  if (pattern === '') throw new Error('the redaction setting holds an empty pattern (two commas in a row, or one at an end)');
  const segments = pattern.split('.');
  if (segments.length > MAX_SEGMENTS) throw new Error(`redaction pattern "${pattern}" has ${segments.length} segments, more than ${MAX_SEGMENTS}`);
  for (const segment of segments) {
    if (segment === '') throw new Error(`redaction pattern "${pattern}" has an empty segment`);
    if (segment === '*' || segment === '**') continue;
    if (segment.includes('*')) throw new Error(`redaction pattern "${pattern}": a * must be a whole segment (* or **), not part of "${segment}"`);
    if (!SEGMENT_NAME.test(segment)) throw new Error(`redaction pattern "${pattern}": segment "${segment}" holds a character outside A-Z, a-z, 0-9, _ and -`);
  }
  if (segments.every((s) => s === '*' || s === '**')) throw new Error(`redaction pattern "${pattern}" names no member, so it would redact whole documents`);
  if (segments.length === 1 && RESERVED_BARE_NAMES.has(pattern)) {
    throw new Error(`redaction pattern "${pattern}" would redact the policy's own answer in every record; give a path such as arguments.${pattern}`);
  }
  return segments;
}

class CompiledRedaction implements Redaction {
  readonly patterns: readonly string[];
  /** Bare names: matched as member names at any depth. */
  readonly #names: ReadonlySet<string>;
  /** Path patterns, each a list of segments. */
  readonly #paths: ReadonlyArray<readonly string[]>;
  /** The path patterns' states at the root, `**` already allowed to match nothing. */
  readonly #rootStates: readonly number[];

  constructor(patterns: readonly string[], names: ReadonlySet<string>, paths: ReadonlyArray<readonly string[]>) {
    this.patterns = patterns;
    this.#names = names;
    this.#paths = paths;
    const root: number[] = [];
    for (let p = 0; p < paths.length; p++) this.#addState(root, p, 0);
    this.#rootStates = root;
  }

  apply(value: unknown): unknown {
    return this.#copy(value, 0, this.#rootStates, null);
  }

  applyCollecting(value: unknown): { value: unknown; redacted: RedactedValues } {
    const redacted = { canonical: new Set<string>(), strings: [] as string[] };
    return { value: this.#copy(value, 0, this.#rootStates, redacted), redacted };
  }

  /**
   * The copy. `states` are the path patterns' walks that reached this value; `collected`, when
   * given, receives what is redacted. Depth is bounded by MAX_JSON_DEPTH, breadth by the value itself.
   */
  #copy(value: unknown, depth: number, states: readonly number[], collected: MutableRedactedValues | null): unknown {
    if (value === null || typeof value !== 'object') return value;
    if (depth >= MAX_JSON_DEPTH) return TOO_DEEP;
    if (Array.isArray(value)) {
      const out: unknown[] = new Array<unknown>(value.length);
      for (let i = 0; i < value.length; i++) {
        // Bare names match member names only; an index is reached by a path's `*`, `**` or its digits.
        const next = states.length === 0 ? NO_STATES : this.#advance(states, String(i));
        out[i] = next === MATCHED ? this.#redact(value[i], collected) : this.#copy(value[i], depth + 1, next, collected);
      }
      return out;
    }
    const out: Record<string, unknown> = {};
    const record = value as Record<string, unknown>;
    for (const key of Object.keys(record)) {
      const next = states.length === 0 ? NO_STATES : this.#advance(states, key);
      const member = next === MATCHED || this.#names.has(key) ? this.#redact(record[key], collected) : this.#copy(record[key], depth + 1, next, collected);
      setMember(out, key, member);
    }
    return out;
  }

  #redact(value: unknown, collected: MutableRedactedValues | null): string {
    if (collected !== null) collectValue(value, 0, collected);
    return REDACTED;
  }

  /** The states after one member or index; MATCHED when some pattern ends on it. */
  #advance(states: readonly number[], key: string): readonly number[] {
    let next: number[] | null = null;
    for (const state of states) {
      const p = Math.floor(state / STATE_STRIDE);
      const position = state % STATE_STRIDE;
      const segment = this.#paths[p]![position]!;
      let target = -1;
      if (segment === '**') target = position;
      else if (segment === '*' || segment === key) target = position + 1;
      if (target < 0) continue;
      if (target === this.#paths[p]!.length) return MATCHED;
      next ??= [];
      this.#addState(next, p, target);
    }
    // `**` may match nothing, so a pattern can end right after consuming this key through it.
    if (next !== null && next.some((s) => s % STATE_STRIDE === this.#paths[Math.floor(s / STATE_STRIDE)]!.length)) return MATCHED;
    return next ?? NO_STATES;
  }

  /** Adds a state and, because `**` may match no level at all, the states past each `**` it stands on. */
  #addState(states: number[], p: number, position: number): void {
    const segments = this.#paths[p]!;
    // Bounded by MAX_SEGMENTS: each turn moves one segment on.
    for (let at = position; at <= segments.length; at++) {
      const state = p * STATE_STRIDE + at;
      if (!states.includes(state)) states.push(state);
      if (segments[at] !== '**') return;
    }
  }
}

/** A distinct array, so `#advance` can say "matched" without allocating. */
const MATCHED: readonly number[] = [];

interface MutableRedactedValues {
  canonical: Set<string>;
  strings: string[];
}

/** Notes a redacted value and every value inside it, to depth MAX_JSON_DEPTH (the copy's own bound). */
function collectValue(value: unknown, depth: number, collected: MutableRedactedValues): void {
  const canonical = canonicalJson(value);
  if (canonical !== null) collected.canonical.add(canonical);
  if (typeof value === 'string' && value.length >= MIN_SUBSTRING_LENGTH) collected.strings.push(value);
  if (value === null || typeof value !== 'object' || depth >= MAX_JSON_DEPTH) return;
  const items = Array.isArray(value) ? value : Object.values(value as Record<string, unknown>);
  for (const item of items) collectValue(item, depth + 1, collected);
}

/**
 * A copy of a value in which anything equal to a redacted value, or any string containing a
 * redacted string, reads "[redacted]". A value too deep to compare is redacted rather than trusted.
 */
function scrub(value: unknown, redacted: RedactedValues): unknown {
  if (redacted.canonical.size === 0) return value;
  const canonical = canonicalJson(value);
  if (canonical === null || redacted.canonical.has(canonical)) return REDACTED;
  if (typeof value === 'string') return redacted.strings.some((s) => value.includes(s)) ? REDACTED : value;
  if (value === null || typeof value !== 'object') return value;
  // canonicalJson answered, so the value nests at most MAX_JSON_DEPTH deep and this recursion is bounded.
  if (Array.isArray(value)) return value.map((item) => scrub(item, redacted));
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value)) setMember(out, key, scrub((value as Record<string, unknown>)[key], redacted));
  return out;
}

/** Constraints as `{field: exact | {op: operand}}`: operands are scrubbed, field and operator names kept. */
function scrubConstraints(constraints: unknown, redacted: RedactedValues): unknown {
  if (!isRecord(constraints)) return scrub(constraints, redacted);
  const out: Record<string, unknown> = {};
  for (const [field, constraint] of Object.entries(constraints)) {
    setMember(out, field, isRecord(constraint) ? scrubOperators(constraint, redacted) : scrub(constraint, redacted));
  }
  return out;
}

/** One field's constraint `{op: operand}`: operator names are the policy's, operands may be secrets. */
function scrubOperators(constraint: Record<string, unknown>, redacted: RedactedValues): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [op, operand] of Object.entries(constraint)) setMember(out, op, scrub(operand, redacted));
  return out;
}

/**
 * Where values of the input sit, by canonical JSON, with their redacted versions: an execute
 * decision's arguments, and the operands of its grants' constraints. A value found in two places
 * takes the version that redaction changed, so a secret is never restored by its twin.
 */
class RedactedPlaces {
  readonly #byCanonical = new Map<string, { value: unknown; changed: boolean }>();

  add(original: unknown, redactedValue: unknown): void {
    const key = canonicalJson(original);
    if (key === null) return;
    const changed = canonicalJson(redactedValue) !== key;
    const known = this.#byCanonical.get(key);
    if (known === undefined || (changed && !known.changed)) this.#byCanonical.set(key, { value: redactedValue, changed });
  }

  /** The redacted version of a value found in the input, or undefined when it is not one of these places. */
  find(value: unknown): { value: unknown } | undefined {
    const key = canonicalJson(value);
    return key === null ? undefined : this.#byCanonical.get(key);
  }
}

/** `redacted[key]`, or "[redacted]" when redaction replaced the container itself. */
function redactedMember(redactedContainer: unknown, key: string | number): unknown {
  if (Array.isArray(redactedContainer) && typeof key === 'number') return redactedContainer[key];
  if (isRecord(redactedContainer) && typeof key === 'string') return redactedContainer[key];
  return REDACTED;
}

function argumentPlaces(input: Record<string, unknown>, redactedInput: Record<string, unknown>): RedactedPlaces {
  const places = new RedactedPlaces();
  if (!isRecord(input.arguments)) return places;
  const redactedArguments = redactedMember(redactedInput, 'arguments');
  for (const [field, value] of Object.entries(input.arguments)) places.add(value, redactedMember(redactedArguments, field));
  return places;
}

function operandPlaces(input: Record<string, unknown>, redactedInput: Record<string, unknown>): RedactedPlaces {
  const places = new RedactedPlaces();
  if (!Array.isArray(input.grants)) return places;
  const redactedGrants = redactedMember(redactedInput, 'grants');
  // Bounded by the input, which the hot path bounded (grants per capability, body size).
  input.grants.forEach((grant: unknown, i) => {
    if (!isRecord(grant) || !isRecord(grant.constraints)) return;
    const redactedConstraints = redactedMember(redactedMember(redactedGrants, i), 'constraints');
    for (const [field, constraint] of Object.entries(grant.constraints)) {
      if (!isRecord(constraint)) continue;
      const redactedConstraint = redactedMember(redactedConstraints, field);
      for (const [op, operand] of Object.entries(constraint)) places.add(operand, redactedMember(redactedConstraint, op));
    }
  });
  return places;
}

/** A value the input held at one of `places` becomes its redacted version; anything else is scrubbed. */
function redactByPlace(value: unknown, places: RedactedPlaces, redacted: RedactedValues): unknown {
  const found = places.find(value);
  return found === undefined ? scrub(value, redacted) : found.value;
}

/** What a member handler of scrubMembers answers for a member it leaves to the scrub. */
const SCRUB: unique symbol = Symbol('scrub');

/**
 * A copy of an object from the output in which `own` decides the members it knows and every other
 * member is scrubbed; anything but an object is scrubbed whole.
 */
function scrubMembers(patterned: unknown, redacted: RedactedValues, own: (key: string, value: unknown) => unknown): unknown {
  if (!isRecord(patterned)) return scrub(patterned, redacted);
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(patterned)) {
    const decided = own(key, value);
    setMember(out, key, decided === SCRUB ? scrub(value, redacted) : decided);
  }
  return out;
}

/**
 * An execute output after the patterns: everything but `allow` is scrubbed, and a violation's
 * `actual` (the argument's value, by the decision contract) becomes the argument as redacted,
 * whichever pattern redacted it. `original` is the output before the patterns, whose violations
 * line up with the copy's: the patterns replace values, never remove array items.
 */
function redactExecuteOutput(original: unknown, patterned: unknown, args: RedactedPlaces, redacted: RedactedValues): unknown {
  const originalViolations = isRecord(original) && Array.isArray(original.violations) ? original.violations : [];
  return scrubMembers(patterned, redacted, (key, value) => {
    if (key === 'allow') return value;
    if (key === 'violations' && Array.isArray(value)) return value.map((v: unknown, i) => redactViolation(originalViolations[i], v, args, redacted));
    return SCRUB;
  });
}

function redactViolation(original: unknown, patterned: unknown, args: RedactedPlaces, redacted: RedactedValues): unknown {
  return scrubMembers(patterned, redacted, (key, value) => {
    if (key === 'actual' && isRecord(original) && Object.hasOwn(original, 'actual')) return redactByPlace(original.actual, args, redacted);
    if (key === 'constraint' && isRecord(value)) return scrubOperators(value, redacted);
    return SCRUB;
  });
}

/** A grants output after the patterns: everything but each verdict and the operators' names is scrubbed. */
function redactGrantsOutput(patterned: unknown, redacted: RedactedValues): unknown {
  return scrubMembers(patterned, redacted, (key, value) => {
    if (key === 'decisions' && Array.isArray(value)) return value.map((d: unknown) => redactGrantDecision(d, redacted));
    return SCRUB;
  });
}

function redactGrantDecision(patterned: unknown, redacted: RedactedValues): unknown {
  return scrubMembers(patterned, redacted, (key, value) => {
    if (key === 'decision') return value;
    // Imposed constraints may echo the agent's proposed ones, which the input held.
    if (key === 'constraints') return scrubConstraints(value, redacted);
    return SCRUB;
  });
}

export interface RedactedDecision {
  input: Record<string, unknown>;
  output: unknown;
  operatorAnswers?: OperatorAnswer[];
}

/**
 * A decision as it may be recorded: the input and output redacted by the patterns, then every value
 * the input lost followed into the output and the operator answers (this file's header). At most
 * MAX_OPERATOR_ANSWERS answers are kept, as a record holds no more; the preview treats a call that
 * was dropped as one it cannot re-run. Never mutates its arguments.
 */
export function redactDecision(
  redaction: Redaction,
  entrypoint: DecisionEntrypoint,
  input: Record<string, unknown>,
  output: unknown,
  operatorAnswers?: ReadonlyArray<OperatorAnswer>,
): RedactedDecision {
  const { value, redacted } = redaction.applyCollecting(input);
  const redactedInput = value as Record<string, unknown>;
  const redactedOutput = redaction.apply(output);
  if (entrypoint === 'agentgate/grants') {
    return { input: redactedInput, output: redactGrantsOutput(redactedOutput, redacted) };
  }
  const args = argumentPlaces(input, redactedInput);
  const result: RedactedDecision = { input: redactedInput, output: redactExecuteOutput(output, redactedOutput, args, redacted) };
  if (operatorAnswers !== undefined) {
    const operands = operandPlaces(input, redactedInput);
    result.operatorAnswers = operatorAnswers.slice(0, MAX_OPERATOR_ANSWERS).map(([name, operand, actual, answer]): OperatorAnswer => [
      name,
      redactByPlace(operand, operands, redacted),
      redactByPlace(actual, args, redacted),
      answer,
    ]);
  }
  return result;
}
