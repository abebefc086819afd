// What the approval page says (DESIGN §8, consent invariants): constraints in words and whole,
// names outside printable ASCII marked, and the names an agent or host chose checked for the tricks
// that make one name pass for another. Look-alike letters are written as escapes here so a reader
// of this file can tell them apart.
import { describe, expect, it } from 'vitest';
import {
  claimWarnings,
  constraintLines,
  imitatedName,
  invisibleCharacters,
  mixesScripts,
  outsidePrintableAscii,
  skeleton,
  type PluginLookup,
} from '../../src/domain/consent-text.ts';
import { checkConstraintSize, GRANT_LIMITS } from '../../src/domain/limits.ts';

const CYRILLIC_A = '\u0430';
const plugins: PluginLookup = (name) => (name === 'max_length' ? { description: 'the argument is a string of at most N characters (code points)' } : undefined);
const conditionsOf = (constraint: unknown) => constraintLines({ field: constraint }, plugins)[0]!.conditions;

describe('constraints in words (DESIGN §6 semantics)', () => {
  it('the audit: a Cyrillic look-alike field name is shown in words and marked, not passed off as "amount"', () => {
    expect(constraintLines({ [`${CYRILLIC_A}mount`]: { max: 10 } }, plugins)).toEqual([
      { field: `${CYRILLIC_A}mount`, fieldOutsideAscii: true, conditions: ['at most 10'] },
    ]);
  });

  it.each([
    ['an exact string', 'USD', ['exactly "USD"']],
    ['an exact number', 500, ['exactly 500']],
    ['an exact null', null, ['exactly null']],
    ['an object value names operators, as the policy reads it', { a: 1 }, ['`a` 1 (an operator this server does not know: approving is refused)']],
    ['an exact object through eq, in compact JSON', { eq: { a: [1, 'b'] } }, ['exactly {"a":[1,"b"]}']],
    ['an empty object, which the policy reads as an exact value', {}, ['exactly {}']],
    ['eq', { eq: 'EUR' }, ['exactly "EUR"']],
    ['min', { min: 1 }, ['at least 1']],
    ['max', { max: 100 }, ['at most 100']],
    ['a range, lower bound first whatever the order given', { max: 100, min: 1 }, ['at least 1', 'at most 100']],
    ['in', { in: ['eu', 'us', 'uk'] }, ['one of "eu", "us", "uk"']],
    ['in: [] admits nothing', { in: [] }, ['nothing: no value is allowed']],
    ['not_in', { not_in: ['x', 'y'] }, ['anything except "x", "y"']],
    ['not_in: [] admits everything', { not_in: [] }, ['anything']],
    ['a min that is not a number admits nothing', { min: '5' }, ['nothing: no value is allowed (`min` needs a number, not "5")']],
    ['an in that is not a list admits nothing', { in: 'USD' }, ['nothing: no value is allowed (`in` needs a list, not "USD")']],
  ])('%s', (_name, constraint, expected) => {
    expect(conditionsOf(constraint)).toEqual(expected);
  });

  it.each([
    ['a known plugin operator, with its description', { max_length: 140 }, ['`max_length` 140 (the argument is a string of at most N characters (code points))']],
    ['an unknown operator, saying approval is refused', { between: [1, 2] }, ['`between` [1,2] (an operator this server does not know: approving is refused)']],
    ['built-ins before plugins, plugins by name', { zeta: 1, max_length: 2, max: 3 }, ['at most 3', '`max_length` 2 (the argument is a string of at most N characters (code points))', '`zeta` 1 (an operator this server does not know: approving is refused)']],
    ['an unknown operator whose name hides a bidi override', { 'ok\u202e': 1 }, ['`ok\\u202e` 1 (an operator this server does not know: approving is refused)']],
  ])('%s', (_name, constraint, expected) => {
    expect(conditionsOf(constraint)).toEqual(expected);
  });

  it.each([
    ['a Cyrillic look-alike', `p${CYRILLIC_A}ypal`, '"p\\u0430ypal"'],
    ['a right-to-left override', 'invoice\u202etxt.exe', '"invoice\\u202etxt.exe"'],
    ['zero-width characters', 'a\u200bb\u200dc\ufeff', '"a\\u200bb\\u200dc\\ufeff"'],
    ['an emoji, as its surrogate pair', '\u{1f600}', '"\\ud83d\\ude00"'],
    ['controls and DEL', 'a\nb\u007f\u0085', '"a\\nb\\u007f\\u0085"'],
    ['quotes and backslashes, JSON-escaped', 'say "hi" \\', '"say \\"hi\\" \\\\"'],
  ])('values show every character outside printable ASCII as an escape: %s', (_name, value, shown) => {
    expect(conditionsOf({ in: [value] })).toEqual([`one of ${shown}`]);
    expect(conditionsOf(value)).toEqual([`exactly ${shown}`]);
  });

  it('one line per field, sorted by field name, ASCII names unmarked', () => {
    const lines = constraintLines({ region: 'eu', amount: { max: 5 }, currency: { in: ['USD'] } }, plugins);
    expect(lines.map((l) => [l.field, l.fieldOutsideAscii])).toEqual([['amount', false], ['currency', false], ['region', false]]);
  });

  it('a constraint of exactly 4096 bytes with a 256-item list is rendered whole, never cut', () => {
    const values = Array.from({ length: GRANT_LIMITS.listOperandItems }, (_, i) => `value-${String(i).padStart(3, '0')}`);
    const withNote = (note: string) => ({ region: { in: values }, note: { not_in: [note] } });
    const padding = 'x'.repeat(GRANT_LIMITS.constraintBytes - Buffer.byteLength(JSON.stringify(withNote(''))));
    const constraints = withNote(padding);
    expect(Buffer.byteLength(JSON.stringify(constraints))).toBe(GRANT_LIMITS.constraintBytes);
    expect(() => checkConstraintSize('cap', constraints)).not.toThrow();
    const [note, region] = constraintLines(constraints, plugins);
    expect(region!.conditions).toEqual([`one of ${values.map((v) => `"${v}"`).join(', ')}`]);
    expect(note!.conditions).toEqual([`anything except "${padding}"`]);
  });
});

describe('code points outside printable ASCII (marking names)', () => {
  it.each([
    ['plain ASCII', 'amount', []],
    ['empty', '', []],
    ['the audit: a Cyrillic a', `${CYRILLIC_A}mount`, ['U+0430']],
    ['distinct, in order', `\u0440${CYRILLIC_A}y${CYRILLIC_A}l\u0440`, ['U+0440', 'U+0430']],
    ['an astral code point as one', 'x\u{1f600}', ['U+1F600']],
    ['controls and DEL at both ends of the range', '\t~ \u007f', ['U+0009', 'U+007F']],
    ['a Latin letter with a diaeresis', '\u00cfsland', ['U+00CF']],
  ])('%s', (_name, text, expected) => {
    expect(outsidePrintableAscii(text)).toEqual(expected);
  });
});

describe('invisible characters (refused at request time in names and values)', () => {
  it.each([
    ['plain text', 'transfer money', []],
    ['visible non-Latin text', '東京 Αθήνα \u00cfsland', []],
    ['a visible combining accent', 'e\u0301', []],
    ['a right-to-left override', 'report\u202efdp.exe', ['U+202E']],
    ['bidi isolates and marks', '\u2066a\u2069\u200f', ['U+2066', 'U+2069', 'U+200F']],
    ['zero-width space, joiner and non-joiner', 'pay\u200bp\u200da\u200cl', ['U+200B', 'U+200D', 'U+200C']],
    ['a soft hyphen and a byte-order mark', 'ad\u00admin\ufeff', ['U+00AD', 'U+FEFF']],
    ['C0 and C1 controls', 'a\u0000b\u0085', ['U+0000', 'U+0085']],
    ['line and paragraph separators', 'a\u2028b\u2029', ['U+2028', 'U+2029']],
    ['a variation selector and the combining grapheme joiner', 'a\ufe0fb\u034f', ['U+FE0F', 'U+034F']],
    ['a Hangul filler', 'admin\u3164', ['U+3164']],
    ['a tag character', 'a\u{e0041}', ['U+E0041']],
  ])('%s', (_name, text, expected) => {
    expect(invisibleCharacters(text)).toEqual(expected);
  });
});

describe('mixed scripts', () => {
  it.each([
    ['the audit: a Cyrillic a among Latin letters', `p${CYRILLIC_A}ypal`, true],
    ['a Latin name with an accent', '\u00cfsland', false],
    ['Han beside Latin', '東京 agent', true],
    ['Greek beside Latin', 'Αθήνα travel', true],
    ['an Arabic-Indic digit standing in for a Latin l', 'paypa\u0661', true],
    ['Latin with digits and punctuation', 'build-bot 2.0 (staging)', false],
    ['Greek only', 'Αθηναϊκές Πληρωμές', false],
    ['Japanese: Han, Katakana and Hiragana together', '東京エージェントのボット', false],
    ['Korean: Hangul with Han', '서울 漢字', false],
    ['a combining mark on a Latin letter', 'Acme\u0301', false],
    ['no letters at all', '12-34', false],
    ['empty', '', false],
  ])('%s', (_name, text, expected) => {
    expect(mixesScripts(text)).toBe(expected);
  });
});

describe('look-alike skeletons: names a person cannot tell apart compare equal', () => {
  it.each([
    ['Greek capitals', '\u0391cme \u03a1ayments', 'acme payments'],
    ['Cyrillic small letters', `${CYRILLIC_A}\u0441m\u0435`, 'acme'],
    ['fullwidth Latin', '\uff21\uff43\uff4d\uff45', 'acme'],
    ['invisible characters and extra spaces dropped', ' Acme\u200b   Pay\u00adments ', 'acme payments'],
  ])('%s', (_name, text, expected) => {
    expect(skeleton(text)).toBe(expected);
  });

  // The brief's list, small and capital: Cyrillic а е о р с х у і ј ѕ ԁ, Latin ɡ, Greek ο α ν ρ τ κ ι.
  it.each([
    ['\u0430', 'a'], ['\u0435', 'e'], ['\u043e', 'o'], ['\u0440', 'p'], ['\u0441', 'c'], ['\u0445', 'x'], ['\u0443', 'y'],
    ['\u0456', 'l'], ['\u0458', 'j'], ['\u0455', 's'], ['\u0501', 'd'], ['\u0261', 'g'],
    ['\u03bf', 'o'], ['\u03b1', 'a'], ['\u03bd', 'v'], ['\u03c1', 'p'], ['\u03c4', 't'], ['\u03ba', 'k'], ['\u03b9', 'l'],
    ['\u0410', 'a'], ['\u0415', 'e'], ['\u041e', 'o'], ['\u0420', 'p'], ['\u0421', 'c'], ['\u0425', 'x'], ['\u0423', 'y'],
    ['\u0406', 'l'], ['\u0408', 'j'], ['\u0405', 's'], ['\u0500', 'd'], ['\ua7ac', 'g'],
    ['\u039f', 'o'], ['\u0391', 'a'], ['\u039d', 'n'], ['\u03a1', 'p'], ['\u03a4', 't'], ['\u039a', 'k'], ['\u0399', 'l'],
  ])('%j passes for %s', (lookAlike, latin) => {
    expect(skeleton(`x${lookAlike}x`)).toBe(`x${latin}x`);
  });

  it.each([
    ['0 and o', 'G00gle', 'Google'],
    ['1, l and i', 'paypa1', 'PayPaI'],
    ['rn and m', 'rnicrosoft', 'microsoft'],
    ['vv and w', 'vvidget', 'widget'],
  ])('%s look the same', (_name, a, b) => {
    expect(skeleton(a)).toBe(skeleton(b));
  });

  const known = ['Acme Payments', 'PayPal'];
  it.each([
    ['the brief: Greek capital Alpha and Rho', '\u0391cme \u03a1ayments', 'Acme Payments'],
    ['a Cyrillic a', `${CYRILLIC_A}cme Payments`, 'Acme Payments'],
    ['fullwidth letters', '\uff21cme Payments', 'Acme Payments'],
    ['rn for m', 'Acrne Payrnents', 'Acme Payments'],
    ['a capital I for an l', 'PayPaI', 'PayPal'],
    ['a zero-width space', 'Pay\u200bPal', 'PayPal'],
    ['the same name', 'Acme Payments', null],
    ['the same name in another case or spacing', ' acme  PAYMENTS', null],
    ['another name', 'Globex', null],
    ['nothing visible', '\u200b', null],
  ])('%s', (_name, text, expected) => {
    expect(imitatedName(text, known)).toBe(expected);
  });
});

describe('warnings under what an agent or host chose', () => {
  const known = ['Acme Payments', 'PayPal'];
  it.each([
    ['an ordinary Latin name', 'Acme Payments', []],
    ['a Greek name', 'Αθηναϊκές Πληρωμές', []],
    ['a Japanese name', '東京エージェント', []],
    ['a reason on several lines', 'Pays invoices\nevery Monday.', []],
    [
      'the audit-style look-alike',
      `P${CYRILLIC_A}yPal`,
      ['mixes letters from different alphabets (Latin, Cyrillic), a common trick to look like another name', 'looks like “PayPal” but is not the same text'],
    ],
    [
      'the brief: Greek capitals imitating a known name',
      '\u0391cme \u03a1ayments',
      ['mixes letters from different alphabets (Greek, Latin), a common trick to look like another name', 'looks like “Acme Payments” but is not the same text'],
    ],
    ['a right-to-left override', 'helper\u202eexe.txt', ['contains invisible characters']],
    ['a zero-width joiner inside a known name', 'Acme\u200d Payments', ['looks like “Acme Payments” but is not the same text', 'contains invisible characters']],
    ['a fullwidth imitation in one script', '\uff30\uff41\uff59\uff30\uff41\uff4c', ['looks like “PayPal” but is not the same text']],
  ])('%s', (_name, text, expected) => {
    expect(claimWarnings(text, known)).toEqual(expected);
  });
});
