// What the approval page says about a request, in words a person can check (DESIGN §8, consent
// invariants): constraints rendered in words and in full, names outside printable ASCII marked, and
// the display fields an agent or host chose (agent name, host name, reason) checked for the tricks
// that make one name pass for another. Pure functions: no I/O, and nothing here cuts text, because
// constraints are already bounded when they are requested (src/domain/limits.ts).
import type { Constraints } from './types.ts';

/** One constrained argument as the page shows it: the conditions all hold together. */
interface ConstraintLine {
  field: string;
  /** True when the field name holds a character outside U+0020..U+007E, which the page marks. */
  fieldOutsideAscii: boolean;
  conditions: string[];
}

/** How the page learns a plugin operator's description: undefined for an operator not loaded. */
export type PluginLookup = (name: string) => { description: string } | undefined;

const isPlainObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

const codePointLabel = (ch: string): string => `U+${ch.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;

/** The distinct code points of `text` that `test` accepts, as "U+XXXX", in first-seen order. */
function codePointsWhere(text: string, test: (ch: string) => boolean): string[] {
  const found = new Set<string>();
  for (const ch of text) if (test(ch)) found.add(codePointLabel(ch));
  return [...found];
}

// ---- Characters a person cannot see as they are ----------------------------------------------

const PRINTABLE_ASCII = /^[\x20-\x7e]$/;

/** The code points of `text` outside U+0020..U+007E, as "U+0430" strings, distinct, in order. */
export function outsidePrintableAscii(text: string): string[] {
  return codePointsWhere(text, (ch) => !PRINTABLE_ASCII.test(ch));
}

// Controls, format characters (zero-width joiners, bidi overrides and isolates, soft hyphen, BOM),
// line and paragraph separators, and every default-ignorable code point (variation selectors,
// combining grapheme joiner, Hangul fillers, tag characters): each renders as nothing or reorders
// the text around it, so what a person reads is not what the server compares.
const INVISIBLE_CLASS = '[\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}\\p{Default_Ignorable_Code_Point}]';
const INVISIBLE = new RegExp(`^${INVISIBLE_CLASS}$`, 'u');

/** The code points of `text` that render as nothing or reorder text, as "U+XXXX", distinct, in order. */
export function invisibleCharacters(text: string): string[] {
  return codePointsWhere(text, (ch) => INVISIBLE.test(ch));
}

// ---- Constraints in words ----------------------------------------------------------------------

/**
 * Text with every UTF-16 unit outside printable ASCII written as \uXXXX (a surrogate pair becomes
 * two escapes), so nothing invisible or look-alike can hide in what the page shows.
 */
function asciiEscaped(text: string): string {
  return text.replace(/[^\x20-\x7e]/g, (unit) => `\\u${unit.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** A JSON value as a compact JSON literal, escaped to printable ASCII. */
export function jsonText(value: unknown): string {
  return asciiEscaped(JSON.stringify(value) ?? 'null');
}

const listText = (values: readonly unknown[]): string => values.map(jsonText).join(', ');

const NOTHING_ALLOWED = 'nothing: no value is allowed';

// The policy reads an operand of the wrong shape as admitting nothing (policies/agentgate.rego), so
// the page says so rather than guessing what was meant.
const unusable = (op: string, needs: string, operand: unknown): string => `${NOTHING_ALLOWED} (\`${op}\` needs ${needs}, not ${jsonText(operand)})`;

const isFiniteNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** One operator in words, with the built-ins' meaning from DESIGN §6 and policies/agentgate.rego. */
function conditionText(op: string, operand: unknown, plugins: PluginLookup): string {
  switch (op) {
    case 'eq':
      return `exactly ${jsonText(operand)}`;
    case 'min':
      return isFiniteNumber(operand) ? `at least ${jsonText(operand)}` : unusable(op, 'a number', operand);
    case 'max':
      return isFiniteNumber(operand) ? `at most ${jsonText(operand)}` : unusable(op, 'a number', operand);
    case 'in':
      if (!Array.isArray(operand)) return unusable(op, 'a list', operand);
      return operand.length === 0 ? NOTHING_ALLOWED : `one of ${listText(operand)}`;
    case 'not_in':
      if (!Array.isArray(operand)) return unusable(op, 'a list', operand);
      return operand.length === 0 ? 'anything' : `anything except ${listText(operand)}`;
    default:
      return pluginConditionText(op, operand, plugins);
  }
}

function pluginConditionText(op: string, operand: unknown, plugins: PluginLookup): string {
  const plugin = plugins(op);
  const meaning = plugin ? plugin.description : 'an operator this server does not know: approving is refused';
  return `\`${asciiEscaped(op)}\` ${jsonText(operand)} (${meaning})`;
}

const BUILTIN_ORDER = ['eq', 'min', 'max', 'in', 'not_in'];

/** Built-ins first in reading order (so a range reads "at least 1", "at most 9"), then others by name. */
function operatorOrder(a: string, b: string): number {
  const rank = (op: string) => (BUILTIN_ORDER.includes(op) ? BUILTIN_ORDER.indexOf(op) : BUILTIN_ORDER.length);
  return rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0);
}

/**
 * One line per constrained field, sorted by field name, each condition in words and in full. A
 * non-empty object lists operators; any other value, `{}` included, is an exact value, as the policy
 * reads it (policies/agentgate.rego, failing_operators).
 */
export function constraintLines(constraints: Constraints, plugins: PluginLookup): ConstraintLine[] {
  return Object.keys(constraints)
    .sort()
    .map((field) => {
      const value = constraints[field];
      const operators = isPlainObject(value) && Object.keys(value).length > 0 ? value : { eq: value };
      const conditions = Object.keys(operators)
        .sort(operatorOrder)
        .map((op) => conditionText(op, operators[op], plugins));
      return { field, fieldOutsideAscii: outsidePrintableAscii(field).length > 0, conditions };
    });
}

// ---- Scripts -----------------------------------------------------------------------------------

// Every Unicode script by its ISO 15924 code, the scripts names are most often written in first so
// the usual lookup stops early. Common, Inherited and Unknown are left out on purpose: digits,
// punctuation, spaces and combining marks belong to every script. A code this Node's regular
// expressions do not know yet is skipped rather than breaking start-up.
const SCRIPT_CODES = `Latn Cyrl Grek Hani Hira Kana Hang Arab Hebr Armn Geor Cher Deva Thai Bopo
  Adlm Aghb Ahom Armi Avst Bali Bamu Bass Batk Beng Berf Bhks Brah Brai Bugi Buhd Cakm Cans Cari Cham
  Chrs Copt Cpmn Cprt Diak Dogr Dsrt Dupl Egyp Elba Elym Ethi Gara Glag Gong Gonm Goth Gran Gujr Gukh
  Guru Hano Hatr Hluw Hmng Hmnp Hung Ital Java Kali Kawi Khar Khmr Khoj Kits Knda Krai Kthi Lana Laoo
  Lepc Limb Lina Linb Lisu Lyci Lydi Mahj Maka Mand Mani Marc Medf Mend Merc Mero Miao Mlym Modi Mong
  Mroo Mtei Mult Mymr Nagm Nand Narb Nbat Newa Nkoo Nshu Ogam Olck Onao Orkh Orya Osge Osma Ougr Palm
  Pauc Perm Phag Phli Phlp Phnx Plrd Prti Rjng Rohg Runr Samr Sarb Saur Sgnw Shaw Shrd Sidd Sidt Sind
  Sinh Sogd Sogo Sora Soyo Sund Sunu Sylo Syrc Tagb Takr Tale Talu Taml Tang Tavt Tayo Telu Tfng Tglg
  Thaa Tibt Tirh Tnsa Todr Tols Toto Tutg Ugar Vaii Vith Wara Wcho Xpeo Xsux Yezi Yiii Zanb`.split(/\s+/);

const SCRIPTS = SCRIPT_CODES.flatMap((code) => {
  try {
    return [{ code, pattern: new RegExp(`^\\p{sc=${code}}$`, 'u') }];
  } catch {
    return [];
  }
});

const BELONGS_TO_ALL = /^[\p{sc=Zyyy}\p{sc=Zinh}\p{sc=Zzzz}]$/u;

/**
 * The script of one code point: null for Common, Inherited and unassigned ones, which belong to
 * every script; Zzzz ("Unknown Script") for a script newer than the list above.
 */
function scriptOf(ch: string): string | null {
  if (BELONGS_TO_ALL.test(ch)) return null;
  return SCRIPTS.find((s) => s.pattern.test(ch))?.code ?? 'Zzzz';
}

/** The distinct scripts of the characters of `text` that have one, in first-seen order. */
function scriptsOf(text: string): string[] {
  const scripts = new Set<string>();
  const seen = new Set<string>();
  for (const ch of text) {
    if (seen.has(ch)) continue;
    seen.add(ch);
    const script = scriptOf(ch);
    if (script !== null) scripts.add(script);
  }
  return [...scripts];
}

// Japanese is written in Han, Hiragana and Katakana together, Korean in Han and Hangul, Chinese in
// Han and Bopomofo. Each of these scripts stands for every writing system it belongs to, so a name in
// one language counts as one script even when that language uses two or three.
const WRITING_SYSTEMS: Readonly<Record<string, readonly string[]>> = {
  Hani: ['Hani', 'Jpan', 'Kore', 'Hanb'],
  Hira: ['Hira', 'Jpan'],
  Kana: ['Kana', 'Jpan'],
  Hang: ['Hang', 'Kore'],
  Bopo: ['Bopo', 'Hanb'],
};

/** True when no one writing system covers every script in `scripts`. */
function noCommonWritingSystem(scripts: readonly string[]): boolean {
  if (scripts.length < 2) return false;
  const systems = (script: string) => WRITING_SYSTEMS[script] ?? [script];
  return !systems(scripts[0]!).some((system) => scripts.every((script) => systems(script).includes(system)));
}

/**
 * True when the letters of `text` come from more than one script. Common and Inherited characters
 * are ignored; digits and marks of one script count as that script, so an Arabic-Indic one standing
 * in for a Latin l still counts.
 */
export function mixesScripts(text: string): boolean {
  return noCommonWritingSystem(scriptsOf(text));
}

const SCRIPT_NAMES = new Intl.DisplayNames(['en'], { type: 'script', fallback: 'code' });

// ---- Look-alikes -------------------------------------------------------------------------------

/** Pairs each code point of `from` with the letter at the same place in `to`. */
const pairs = (from: string, to: string): Array<[string, string]> => [...from].map((ch, i) => [ch, to[i]!]);

// Cyrillic, Greek and Latin letters that pass for plain Latin ones, so that two names a person
// cannot tell apart reduce to the same skeleton. Written as escapes so this table cannot itself
// deceive a reader.
// Capitals map to the lowercase letter they pass for once case is folded: Greek capital nu looks
// like N while its small letter looks like v.
const LOOK_ALIKES = new Map<string, string>([
  // Cyrillic small letters that look like a e o p c x y i j s d h q w l, small straight u (y), capital palochka (l).
  ...pairs('\u0430\u0435\u043e\u0440\u0441\u0445\u0443\u0456\u0458\u0455\u0501\u04bb\u051b\u051d\u04cf\u04af\u04c0', 'aeopcxyijsdhqwlyl'),
  // Cyrillic capitals that look like A B E K M H O P C T X Y I J S D, and capital straight u (Y).
  ...pairs('\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0423\u0406\u0408\u0405\u0500\u04ae', 'abekmhopctxyijsdy'),
  // Greek small omicron alpha nu rho tau kappa iota.
  ...pairs('\u03bf\u03b1\u03bd\u03c1\u03c4\u03ba\u03b9', 'oavptki'),
  // Greek capital Omicron Alpha Nu Rho Tau Kappa Iota Beta Epsilon Zeta Eta Mu Chi Upsilon.
  ...pairs('\u039f\u0391\u039d\u03a1\u03a4\u039a\u0399\u0392\u0395\u0396\u0397\u039c\u03a7\u03a5', 'oanptkibezhmxy'),
  // Latin small and capital script g.
  ...pairs('\u0261\ua7ac', 'gg'),
]);

const EVERY_INVISIBLE = new RegExp(INVISIBLE_CLASS, 'gu');
// Invisible characters that still break a line or leave a gap: they read as a space, not as nothing.
const LINE_SPACING = /^[\t\n\v\f\r\u0085\u2028\u2029]$/;

/**
 * What `text` looks like, reduced so that look-alikes compare equal: NFKC (fullwidth and other
 * compatibility forms become plain letters), invisible characters dropped and spacing collapsed
 * (the page shows neither), look-alike letters mapped, case folded, and 0/o, 1/l/i, rn/m, vv/w
 * treated as one.
 */
export function skeleton(text: string): string {
  const visible = text.normalize('NFKC').replace(EVERY_INVISIBLE, (ch) => (LINE_SPACING.test(ch) ? ' ' : ''));
  const spaced = visible.replace(/\s+/gu, ' ').trim();
  const latin = [...spaced].map((ch) => LOOK_ALIKES.get(ch) ?? ch).join('');
  return latin.toLowerCase().replace(/rn/g, 'm').replace(/vv/g, 'w').replace(/0/g, 'o').replace(/[1i]/g, 'l');
}

/** Text as a person reads it: canonical form, spacing collapsed, case ignored. */
const plainText = (text: string): string => text.normalize('NFC').replace(/\s+/gu, ' ').trim().toLowerCase();

/** The first of `known` that `text` looks like without being the same text, else null. */
export function imitatedName(text: string, known: readonly string[]): string | null {
  const target = skeleton(text);
  if (target === '') return null;
  return known.find((name) => skeleton(name) === target && plainText(name) !== plainText(text)) ?? null;
}

// ---- Warnings under what an agent or host chose ------------------------------------------------

// Line breaks and tabs are ordinary in a reason and the page collapses them (displayText in
// src/http/device/pages/html.ts); warning on them would teach people to ignore the warning.
const ORDINARY_SPACING = new Set(['U+0009', 'U+000A', 'U+000D']);

/** The warnings, in plain words, the page shows under a display field an agent or host chose. */
export function claimWarnings(text: string, known: readonly string[]): string[] {
  const warnings: string[] = [];
  const scripts = scriptsOf(text);
  if (noCommonWritingSystem(scripts)) {
    const names = scripts.map((code) => SCRIPT_NAMES.of(code) ?? code).join(', ');
    warnings.push(`mixes letters from different alphabets (${names}), a common trick to look like another name`);
  }
  const imitated = imitatedName(text, known);
  if (imitated !== null) warnings.push(`looks like “${imitated}” but is not the same text`);
  if (invisibleCharacters(text).some((c) => !ORDINARY_SPACING.has(c))) warnings.push('contains invisible characters');
  return warnings;
}
