// ISO 8601 times (`new Date(ms).toISOString()`) for code that formats one per request: every audit
// event is stamped with one. Formatting a date is most of the cost, and consecutive times mostly
// share their second, so the part up to the seconds is made once per second and reused.

/** The first epoch millisecond whose ISO year has five digits (10000-01-01), written differently. */
const YEAR_10000_MS = 253_402_300_800_000;

/**
 * Formats epoch milliseconds exactly as `new Date(ms).toISOString()` does. Each formatter keeps its
 * own last second, so callers that format different times (a test's manual clock, the system's)
 * do not evict each other's. Whole milliseconds from 1970 to the year 9999 take the cached path;
 * anything else (a fraction, a negative or huge time, NaN) is left to Date, which formats it (or
 * throws) as it always did.
 */
export class IsoTimeFormatter {
  #second = Number.NaN;
  /** `YYYY-MM-DDTHH:MM:SS.` of #second. */
  #prefix = '';

  format(epochMs: number): string {
    if (!Number.isInteger(epochMs) || epochMs < 0 || epochMs >= YEAR_10000_MS) return new Date(epochMs).toISOString();
    const second = Math.floor(epochMs / 1000);
    if (second !== this.#second) {
      this.#second = second;
      this.#prefix = new Date(second * 1000).toISOString().slice(0, 20);
    }
    const ms = epochMs - second * 1000;
    return `${this.#prefix}${ms < 10 ? '00' : ms < 100 ? '0' : ''}${ms}Z`;
  }
}
