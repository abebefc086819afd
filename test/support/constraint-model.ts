// A plain TypeScript model of how agentgate judges an execute's arguments (DESIGN §6, protocol
// §8.4, plugins/README.md), written from the documents and not from the code, so the property test
// (test/unit/property.constraints.test.ts) can hold the compiled policy, the request parsing before
// it and the plugin operators to it. Nothing here imports src/: where the model and the code agree
// by construction, a shared bug could not be seen.

/** A violation as the execute answer carries it: the field, its failing operators, the value if supplied. */
export interface ModelViolation {
  field: string;
  constraint: Record<string, unknown>;
  actual?: unknown;
}

/** The policy's decision: allowed by a grant (its index), or refused with the first grant's violations. */
export type ModelDecision =
  | { kind: 'decided'; allow: true; grantIndex: number }
  | { kind: 'decided'; allow: false; violations: ModelViolation[] };

/** What execute does with the arguments: refuse them with 400, or decide. */
export type ModelOutcome = { kind: 'refused'; because: string } | ModelDecision;

/** One plugin operator as plugins/README.md and the plugin's own header describe it. */
export interface PluginModel {
  /** Whether the operand passes the operator's schema (refused operands never allow). */
  operandOk(operand: unknown): boolean;
  /** Whether `actual` (null for a missing argument) satisfies a valid operand. */
  passes(operand: unknown, actual: unknown): boolean;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

// ---- JSON values --------------------------------------------------------------------------------

/**
 * JSON structural equality (DESIGN §6): numbers by value (so 500 equals 500.0 and -0 equals 0),
 * arrays element by element in order, objects by their set of keys and each key's value.
 */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (typeof a === 'number' || typeof b === 'number') return typeof a === 'number' && typeof b === 'number' && a === b;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false;
    return true;
  }
  if (isPlainObject(a) || isPlainObject(b)) {
    if (!isPlainObject(a) || !isPlainObject(b)) return false;
    const keys = Object.keys(a);
    if (keys.length !== Object.keys(b).length) return false;
    return keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
  }
  return a === b;
}

/** True for a UTF-16 string in which every surrogate is half of a pair (text JSON can carry to any peer). */
export function wellFormed(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0xd800 || unit > 0xdfff) continue;
    const next = text.charCodeAt(i + 1);
    if (unit > 0xdbff || !(next >= 0xdc00 && next <= 0xdfff)) return false;
    i++;
  }
  return true;
}

/**
 * Why a parsed argument value cannot be judged, or null. JSON text can spell numbers no double
 * holds (1e400 parses to Infinity) and strings that are not Unicode (a lone "\ud800" escape); the
 * first would reach the policy as null and the second cannot be read by it, so both must be refused
 * with 400 before the policy runs, never decided on.
 */
export function unjudgeable(value: unknown): string | null {
  if (typeof value === 'number') return Number.isFinite(value) ? null : 'a number out of range';
  if (typeof value === 'string') return wellFormed(value) ? null : 'text that is not Unicode';
  if (Array.isArray(value)) {
    for (const item of value) {
      const why = unjudgeable(item);
      if (why) return why;
    }
    return null;
  }
  if (isPlainObject(value)) {
    for (const [key, item] of Object.entries(value)) {
      const why = wellFormed(key) ? unjudgeable(item) : 'text that is not Unicode';
      if (why) return why;
    }
  }
  return null;
}

// ---- numeric strings (DESIGN §6: coerced only where the input schema says number) ----------------

/**
 * A decimal number as people write it: an optional minus, digits with at most one decimal point
 * (at least one digit), an optional exponent, with surrounding white space ignored; it must name a
 * finite number. Written as a scanner, not a regular expression, to stay independent of the code.
 */
export function numericString(text: string): number | null {
  const s = text.trim();
  let i = 0;
  const digits = () => {
    const start = i;
    while (i < s.length && s[i]! >= '0' && s[i]! <= '9') i++;
    return i - start;
  };
  if (s[i] === '-') i++;
  let mantissa = digits();
  if (s[i] === '.') {
    i++;
    mantissa += digits();
  }
  if (mantissa === 0) return null;
  if (s[i] === 'e' || s[i] === 'E') {
    i++;
    if (s[i] === '+' || s[i] === '-') i++;
    if (digits() === 0) return null;
  }
  if (i !== s.length) return null;
  const value = Number(s);
  return Number.isFinite(value) ? value : null;
}

// ---- the shipped plugins -----------------------------------------------------------------------

/** Code points, counting a surrogate pair once and anything else unit by unit. */
function codePointCount(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    const next = text.charCodeAt(i + 1);
    if (unit >= 0xd800 && unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) i++;
    count++;
  }
  return count;
}

/**
 * An IP address as a 128-bit number, IPv4 written into the IPv4-mapped block ::ffff:0:0/96 (RFC 4291
 * §2.5.5.2), so 10.0.0.1 and ::ffff:10.0.0.1 are one address; null when `text` is not an address.
 * IPv4 is strict dotted decimal (no leading zeros); an IPv6 zone (%eth0) names an interface, not a
 * different address, and is ignored.
 */
export function ipNumber(text: string): { value: bigint; v4: boolean } | null {
  const v4 = ipv4Number(text);
  if (v4 !== null) return { value: 0xffff_0000_0000n | v4, v4: true };
  const v6 = ipv6Number(text);
  return v6 === null ? null : { value: v6, v4: false };
}

function ipv4Number(text: string): bigint | null {
  const parts = text.split('.');
  if (parts.length !== 4) return null;
  let value = 0n;
  for (const part of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part) || Number(part) > 255) return null;
    value = (value << 8n) | BigInt(part);
  }
  return value;
}

function ipv6Number(text: string): bigint | null {
  const zone = text.indexOf('%');
  const address = zone >= 0 ? text.slice(0, zone) : text;
  if (zone >= 0 && !/^[0-9A-Za-z._-]+$/.test(text.slice(zone + 1))) return null;
  const halves = address.split('::');
  if (halves.length > 2) return null;
  const groups = (half: string): number[] | null => {
    if (half === '') return [];
    const out: number[] = [];
    const pieces = half.split(':');
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i]!;
      if (i === pieces.length - 1 && piece.includes('.')) {
        const v4 = ipv4Number(piece);
        if (v4 === null) return null;
        out.push(Number(v4 >> 16n), Number(v4 & 0xffffn));
      } else if (/^[0-9A-Fa-f]{1,4}$/.test(piece)) {
        out.push(parseInt(piece, 16));
      } else {
        return null;
      }
    }
    return out;
  };
  const head = groups(halves[0]!);
  const tail = halves.length === 2 ? groups(halves[1]!) : [];
  if (head === null || tail === null) return null;
  if (halves.length === 2 && (halves[0]!.includes('.') || head.length + tail.length > 7)) return null;
  if (halves.length === 1 && head.length !== 8) return null;
  const all = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  return all.reduce((acc, group) => (acc << 16n) | BigInt(group), 0n);
}

/** "address/prefix" as (network number, prefix in the 128-bit space), or null when it is not a network. */
export function cidrNetwork(text: string): { value: bigint; bits: number } | null {
  const slash = text.indexOf('/');
  if (slash < 0 || text.indexOf('/', slash + 1) >= 0) return null;
  const prefix = text.slice(slash + 1);
  if (!/^[0-9]{1,3}$/.test(prefix)) return null;
  const address = ipNumber(text.slice(0, slash));
  if (address === null) return null;
  const bits = Number(prefix);
  if (bits > (address.v4 ? 32 : 128)) return null;
  return { value: address.value, bits: address.v4 ? 96 + bits : bits };
}

function inNetwork(address: bigint, network: { value: bigint; bits: number }): boolean {
  const shift = BigInt(128 - network.bits);
  return address >> shift === network.value >> shift;
}

/**
 * Patterns the regex operand must refuse, whatever JavaScript makes of them: no backreferences or
 * lookaround in RE2, broken syntax, and counted repetition past the 500-instruction cost bound.
 */
export const REFUSED_PATTERNS: readonly string[] = [
  '(a)\\1', '(?=a)b', '(?!a)b', '(?<=a)b', '(', '[a', 'a**', 'a{2,1}', '*a', '(?:a|b){300}c{300}', 'x{1000}',
];

const stringList = (v: unknown, min: number, max: number, itemOk: (s: string) => boolean): v is string[] =>
  Array.isArray(v) && v.length >= min && v.length <= max && v.every((s) => typeof s === 'string' && itemOk(s));

/**
 * The shipped plugins (plugins/README.md, "Shipped plugins"). The regex model judges the patterns
 * the property test writes: a grammar whose meaning is the same in RE2 and in JavaScript with the
 * `u` flag (literals, `.`, classes, \d, \w, groups, alternation, greedy and lazy quantifiers,
 * anchors), plus REFUSED_PATTERNS; it is not a model of all of RE2.
 */
export const PLUGIN_MODELS: Readonly<Record<string, PluginModel>> = {
  max_length: {
    operandOk: (n) => typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= 1_000_000,
    passes: (n, actual) => typeof actual === 'string' && codePointCount(actual) <= (n as number),
  },
  prefix: {
    operandOk: (v) => stringList(v, 1, 100, (s) => s.length >= 1 && s.length <= 256),
    passes: (v, actual) => typeof actual === 'string' && (v as string[]).some((p) => actual.slice(0, p.length) === p),
  },
  cidr: {
    operandOk: (v) => stringList(v, 1, 100, (s) => s.length <= 64 && cidrNetwork(s) !== null),
    passes: (v, actual) => {
      const address = typeof actual === 'string' ? ipNumber(actual) : null;
      return address !== null && (v as string[]).some((n) => inNetwork(address.value, cidrNetwork(n)!));
    },
  },
  regex: {
    operandOk: (p) => typeof p === 'string' && p.length >= 1 && p.length <= 256 && !REFUSED_PATTERNS.includes(p),
    // RE2's `.` matches anything but \n, JavaScript's also stops at \r, U+2028 and U+2029; the
    // grammar writes `.` only outside classes and unescaped, so spelling it out is exact.
    passes: (p, actual) => typeof actual === 'string' && actual.length <= 1024 && new RegExp((p as string).replaceAll('.', '[^\\n]'), 'u').test(actual),
  },
};

// ---- the decision ------------------------------------------------------------------------------

/** Whether one operator refuses the argument (`present` false: the argument is missing). */
function violates(op: string, operand: unknown, present: boolean, actual: unknown): boolean {
  switch (op) {
    case 'eq':
      return !present || !jsonEqual(actual, operand);
    case 'min':
      return !present || typeof actual !== 'number' || typeof operand !== 'number' || actual < operand;
    case 'max':
      return !present || typeof actual !== 'number' || typeof operand !== 'number' || actual > operand;
    case 'in':
      return !present || !Array.isArray(operand) || !operand.some((v) => jsonEqual(actual, v));
    case 'not_in':
      return !Array.isArray(operand) || (present && operand.some((v) => jsonEqual(actual, v)));
    default: {
      // A plugin sees null for a missing argument; an unknown name or a refused operand never allows.
      const plugin = Object.hasOwn(PLUGIN_MODELS, op) ? PLUGIN_MODELS[op] : undefined;
      return !(plugin && plugin.operandOk(operand) && plugin.passes(operand, present ? actual : null));
    }
  }
}

/** Code point order, as the policy sorts field names (Go compares strings byte by byte in UTF-8). */
export function byCodePoint(a: string, b: string): number {
  const x = [...a].map((c) => c.codePointAt(0)!);
  const y = [...b].map((c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return x.length - y.length;
}

/** One grant's violations, one per violated field, sorted by field. */
export function grantViolations(constraints: unknown, args: Record<string, unknown>): ModelViolation[] {
  if (constraints === null || constraints === undefined) return [];
  if (!isPlainObject(constraints)) return [{ field: '*', constraint: { malformed_constraints: true } }];
  const out: ModelViolation[] = [];
  for (const field of Object.keys(constraints).sort(byCodePoint)) {
    const value = constraints[field];
    // A non-empty object lists operators; anything else (including {}) is an exact value.
    const ops = isPlainObject(value) && Object.keys(value).length > 0 ? value : { eq: value };
    const present = Object.hasOwn(args, field);
    const actual = present ? args[field] : undefined;
    const failing = Object.fromEntries(Object.entries(ops).filter(([op, operand]) => violates(op, operand, present, actual)));
    if (Object.keys(failing).length > 0) out.push({ field, constraint: failing, ...(present ? { actual } : {}) });
  }
  return out;
}

/** Allowed by the first grant with no violations; otherwise refused with the first grant's violations. */
export function decide(grants: readonly unknown[], args: Record<string, unknown>): ModelDecision {
  const perGrant = grants.map((g) => grantViolations(g, args));
  const allowing = perGrant.findIndex((vs) => vs.length === 0);
  if (allowing >= 0) return { kind: 'decided', allow: true, grantIndex: allowing };
  return { kind: 'decided', allow: false, violations: perGrant[0] ?? [] };
}

