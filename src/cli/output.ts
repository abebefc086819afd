// How the command-line tool writes: aligned tables and key-value lines for people, the server's
// JSON untouched for scripts (--json). Everything a person reads is made terminal-safe first:
// agent names, reasons and messages come from hosts nobody vetted, and a name carrying escape
// sequences must not be able to repaint the admin's terminal.

export interface Io {
  stdout(text: string): void;
  stderr(text: string): void;
}

/** A cell longer than this is cut (the full value is in the --json output). */
const MAX_CELL_CHARS = 80;

/** C0 and C1 controls, DEL, and the Unicode bidirectional overrides and isolates. */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** One terminal-safe line: control characters are shown as \u{..} escapes rather than obeyed. */
export function safe(value: unknown): string {
  const text = typeof value === 'string' ? value : value === undefined || value === null ? '' : JSON.stringify(value);
  return text.replace(UNSAFE, (ch) => `\\u{${ch.codePointAt(0)!.toString(16)}}`);
}

const cell = (value: unknown): string => {
  const text = safe(value);
  return text.length > MAX_CELL_CHARS ? `${text.slice(0, MAX_CELL_CHARS - 1)}…` : text;
};

/** Columns aligned by padding, two spaces apart, headers in capitals; the last column is not padded. */
export function table(headers: readonly string[], rows: ReadonlyArray<readonly unknown[]>): string {
  const cells = [headers.map((h) => h.toUpperCase()), ...rows.map((row) => headers.map((_, i) => cell(row[i])))];
  const widths = headers.map((_, i) => Math.max(...cells.map((row) => row[i]!.length)));
  return cells.map((row) => row.map((text, i) => (i === row.length - 1 ? text : text.padEnd(widths[i]!))).join('  ').trimEnd()).join('\n') + '\n';
}

/** `key  value` lines with the values aligned; pairs whose value is undefined are left out. */
export function keyValues(pairs: ReadonlyArray<readonly [string, unknown]>): string {
  const shown = pairs.filter(([, value]) => value !== undefined && value !== null);
  const width = Math.max(0, ...shown.map(([key]) => key.length));
  return shown.map(([key, value]) => `${key.padEnd(width)}  ${safe(value)}`).join('\n') + '\n';
}

/** A list of names for one cell or line ('-' when empty). */
export const list = (values: readonly unknown[] | undefined): string =>
  values && values.length > 0 ? values.map((v) => safe(v)).join(', ') : '-';

/** The human line of a refusal, and its structured extras (violations, unknown operators, ...). */
export function refusalLines(code: string, message: string, body: Record<string, unknown> | null): string {
  const extras = body ? Object.entries(body).filter(([key]) => key !== 'error' && key !== 'message') : [];
  const lines = [`error: ${safe(code)}: ${safe(message)}`, ...extras.map(([key, value]) => `  ${safe(key)}: ${safe(value)}`)];
  return lines.join('\n') + '\n';
}
