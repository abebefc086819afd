// HTML that escapes by default (DESIGN §8: templates that escape, never HTML built by string
// concatenation). `html` is a tagged template: every interpolated value is escaped unless it is
// already SafeHtml (the result of another `html` template), and arrays are joined. Nothing else
// produces SafeHtml, so a string from a request can only ever reach a page as text.

export class SafeHtml {
  readonly #text: string;
  constructor(text: string) {
    this.#text = text;
  }
  toString(): string {
    return this.#text;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

function escapeHtml(text: string): string {
  return text.replace(/[&<>"'`]/g, (c) => ESCAPES[c]!);
}

function render(value: unknown): string {
  if (value instanceof SafeHtml) return value.toString();
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === null || value === undefined || value === false) return '';
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: unknown[]): SafeHtml {
  let out = strings[0]!;
  values.forEach((value, i) => {
    out += render(value) + strings[i + 1]!;
  });
  return new SafeHtml(out);
}

/**
 * Text an agent or host chose (names, reasons, descriptions) as a person may see it: control and
 * bidirectional-override characters removed (they can disguise text), whitespace collapsed, and
 * cut to `max` characters. Still escaped when interpolated; never a link, never markdown.
 */
export function displayText(text: string | undefined, max: number): string {
  if (!text) return '';
  // eslint-disable-next-line no-control-regex
  const cleaned = text.replace(/[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g, ' ').replace(/\s+/g, ' ').trim();
  const chars = [...cleaned];
  return chars.length > max ? `${chars.slice(0, max - 1).join('')}…` : cleaned;
}

/**
 * Markup this module's callers built themselves from constants and JSON they escaped (a data
 * block): the one way around escaping, kept to those two uses.
 */
export function trusted(markup: string): SafeHtml {
  return new SafeHtml(markup);
}
