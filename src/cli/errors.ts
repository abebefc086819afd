// The command-line tool's failures, one class per exit code (docs/cli.md), so a script can tell
// "I asked wrongly" from "the server said no" from "there was nobody to ask".

/** Exit codes, documented in docs/cli.md; scripts depend on them, so they never change meaning. */
export const EXIT = {
  /** The command did what it was asked. */
  ok: 0,
  /** The server answered with an error (4xx or 5xx), or with something that is not its API. */
  refused: 1,
  /** The command line was wrong (unknown command or option, missing or malformed argument) or a
   * file it names cannot be used. Nothing was sent to the server. */
  usage: 2,
  /** The server could not be reached (connection refused, DNS, TLS) or did not answer in time. */
  unreachable: 3,
} as const;


/** The command line (or a local file it names) is wrong; `help` names the command whose usage to show. */
export class UsageError extends Error {
  readonly help: string | undefined;
  constructor(message: string, help?: string) {
    super(message);
    this.name = 'UsageError';
    this.help = help;
  }
}

/** The server answered with an error status; `body` is its JSON (`{error, message, ...}`) as sent. */
export class ServerRefused extends Error {
  readonly status: number;
  /** The error code from the body, or `http_<status>` when the body has none. */
  readonly code: string;
  /** The raw body text, printed as is with --json. */
  readonly bodyText: string;
  readonly body: Record<string, unknown> | null;
  constructor(status: number, code: string, message: string, bodyText: string, body: Record<string, unknown> | null) {
    super(message);
    this.name = 'ServerRefused';
    this.status = status;
    this.code = code;
    this.bodyText = bodyText;
    this.body = body;
  }
}

/** Nobody answered: the connection failed or the answer did not come within the timeout. */
export class ServerUnreachable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ServerUnreachable';
  }
}
