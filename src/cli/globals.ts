// The options every command takes, and how they and the environment become the settings a run
// uses: the server's address, the admin token, the request timeout.
import { nonEmpty, stringOption, type OptionSpec, type OptionValues } from './command.ts';
import { UsageError } from './errors.ts';

export const GLOBAL_OPTIONS: Readonly<Record<string, OptionSpec>> = {
  url: { type: 'string', valueName: 'URL', description: 'the agentgate server (default: $AGENTGATE_URL, else http://127.0.0.1:3000)' },
  'admin-token': {
    type: 'string', valueName: 'TOKEN',
    description: 'the admin API token (default: $AGENTGATE_ADMIN_TOKEN, else $ADMIN_TOKEN); prefer the variable, since other users can see arguments',
  },
  json: { type: 'boolean', description: "print the server's JSON (or one JSON object) and nothing else on stdout" },
  'timeout-ms': { type: 'string', valueName: 'MS', description: 'give up on a request after this many milliseconds (default 10000)' },
  help: { type: 'boolean', short: 'h', description: 'show help' },
};

const DEFAULT_URL = 'http://127.0.0.1:3000';
const DEFAULT_TIMEOUT_MS = 10_000;
/** Ten minutes: longer than any request should take, short enough that a stuck script ends. */
const MAX_TIMEOUT_MS = 600_000;

interface GlobalSettings {
  baseUrl: URL;
  adminToken: string | undefined;
  timeoutMs: number;
}

export function globalSettings(values: OptionValues, env: Readonly<Record<string, string | undefined>>): GlobalSettings {
  const urlText = stringOption(values, 'url') ?? nonEmpty(env.AGENTGATE_URL) ?? DEFAULT_URL;
  let baseUrl: URL;
  try {
    baseUrl = new URL(urlText);
  } catch {
    throw new UsageError(`--url ${JSON.stringify(urlText)} is not a URL`);
  }
  if (baseUrl.protocol !== 'http:' && baseUrl.protocol !== 'https:') throw new UsageError('--url must be an http:// or https:// address');
  // Credentials in the address would be sent to the server as-is and echoed in messages.
  if (baseUrl.username !== '' || baseUrl.password !== '') throw new UsageError('--url must not contain a user name or password');
  const timeoutText = stringOption(values, 'timeout-ms');
  let timeoutMs = DEFAULT_TIMEOUT_MS;
  if (timeoutText !== undefined) {
    if (!/^\d{1,7}$/.test(timeoutText) || Number(timeoutText) < 1 || Number(timeoutText) > MAX_TIMEOUT_MS) {
      throw new UsageError(`--timeout-ms must be a whole number from 1 to ${MAX_TIMEOUT_MS}`);
    }
    timeoutMs = Number(timeoutText);
  }
  const adminToken = stringOption(values, 'admin-token') ?? nonEmpty(env.AGENTGATE_ADMIN_TOKEN) ?? nonEmpty(env.ADMIN_TOKEN);
  return { baseUrl, adminToken: adminToken === '' ? undefined : adminToken, timeoutMs };
}
