// The closed table of every error code agentgate emits and its HTTP status (DESIGN §9).
// Code throws `new ApiError(code, message)`; the status is never chosen at the throw site.

export const ERROR_STATUS = {
  // Contract §7, common codes.
  invalid_request: 400,
  unknown_constraint_operator: 400,
  invalid_jwt: 401,
  agent_revoked: 403,
  agent_expired: 403,
  absolute_lifetime_exceeded: 403,
  agent_pending: 403,
  host_revoked: 403,
  host_pending: 403,
  unauthorized: 403,
  rate_limited: 429,
  internal_error: 500,
  // Contract §7, per-endpoint codes.
  unsupported_mode: 400,
  unsupported_algorithm: 400,
  invalid_capabilities: 400,
  agent_exists: 409,
  already_granted: 409,
  capability_not_granted: 403,
  constraint_violated: 403,
  capability_not_found: 404,
  agent_not_found: 404,
  host_not_found: 404,
  authentication_required: 401,
  // DESIGN §9 additions.
  agent_rejected: 403,
  agent_claimed: 403,
  grant_revoked: 403,
  limit_exceeded: 403,
  host_rejected: 403,
  service_unavailable: 503,
  // RFC 8628 §3.5 error codes, inside the usual {error, message} body (protocol §10).
  /** The client polls a pending approval faster than its interval; wait Retry-After seconds. */
  slow_down: 429,
  /** The approval's code expired; nothing is approvable with it (ask for a new code). */
  expired_token: 400,
  /** The person denied the request; final. */
  access_denied: 403,
  /** The record changed under too many concurrent writers for this request to win; retrying succeeds. */
  conflict: 409,
  dynamic_host_registration_disabled: 403,
  not_found: 404,
  /** A reload (policy artefact or operator plugins) failed its checks; the previous set keeps serving. */
  reload_rejected: 422,
  /** A guarded reload's preview flipped more recorded decisions than `max_flips` allows; the live policy stays. The body holds the preview. */
  max_flips_exceeded: 409,
  /** No shadow policy is loaded on this instance (promote or read one first). */
  no_shadow_policy: 404,
  /** The request line and headers exceed HTTP_MAX_HEADER_BYTES (answered by src/http/server.ts, as Node would: 431). */
  request_header_fields_too_large: 431,
  /** The request was not received within HTTP_HEADERS_TIMEOUT_MS or HTTP_REQUEST_TIMEOUT_MS (as Node would: 408). */
  request_timeout: 408,
  /** A chunked body's chunk extensions exceed Node's 16 KiB (as Node would: 413; an oversized body is invalid_request). */
  chunk_extensions_too_large: 413,
  // Hosts a person enrolls (docs/approving.md, "Enrolling a host").
  /** No enrollment has this token: it is wrong, malformed, or so old it was forgotten (a day after it was made). */
  enrollment_token_invalid: 401,
  /** The enrollment token's hour has passed; the person makes a new one. */
  enrollment_token_expired: 401,
  /** The enrollment token was already used: it bound a key once, and never binds another. */
  host_not_pending_enrollment: 400,
  /** The key belongs to a host that is linked to a person already; it is never linked again through this door. */
  host_already_linked: 409,
} as const satisfies Record<string, number>;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** Extra structured fields some codes carry (violations, unknown_operators, invalid_capabilities). */
type ErrorExtra = Record<string, unknown>;

export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly extra: ErrorExtra | undefined;
  /** Response headers that belong to this refusal (e.g. WWW-Authenticate, Retry-After). */
  readonly headers: Record<string, string> | undefined;

  constructor(code: ErrorCode, message: string, extra?: ErrorExtra, headers?: Record<string, string>) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
    this.status = ERROR_STATUS[code];
    this.extra = extra;
    this.headers = headers;
  }

  /** The public body: {error, message, ...extra}. Nothing internal leaks through it. */
  body(): Record<string, unknown> {
    return { error: this.code, message: this.message, ...(this.extra ?? {}) };
  }
}

export const isApiError = (value: unknown): value is ApiError => value instanceof ApiError;
