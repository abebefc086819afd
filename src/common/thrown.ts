// Describing a thrown value for a log line or a message between threads. Anything can be thrown,
// including objects whose getters throw in turn (a plugin's, say), so nothing of it is trusted.

/** A short description of anything thrown, without trusting its getters. */
export function describeThrown(error: unknown): string {
  try {
    if (error instanceof Error) return `${error.name}: ${error.message}`.slice(0, 500);
    return String(error).slice(0, 500);
  } catch {
    return 'an unprintable value';
  }
}

/**
 * An Error whose `name` is its class's name, so a log line or describeThrown says which kind of
 * failure it was. A kind with nothing of its own beyond its name is one line: `class X extends NamedError {}`.
 */
export class NamedError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}
