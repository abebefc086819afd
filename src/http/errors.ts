// One error renderer for the whole app (STYLE: errors are one closed table). Clients see
// {error, message, ...extra}; causes and stacks go to the log with the request id. A 5xx body also
// carries `request_id` (the X-Request-Id header's value), so whoever reports the failure can quote
// it and an operator can find the log lines that explain it.
import type { NextFunction, Request, Response } from 'express';
import { ApiError, isApiError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import { requestContextOf } from './access.ts';

interface BodyParserError {
  type?: string;
  status?: number;
}

function toApiError(err: unknown): ApiError | null {
  if (isApiError(err)) return err;
  const parserError = err as BodyParserError;
  if (parserError && typeof parserError.type === 'string' && typeof parserError.status === 'number' && parserError.status < 500) {
    if (parserError.type === 'entity.too.large') return new ApiError('invalid_request', 'the request body is too large');
    if (parserError.type === 'entity.parse.failed') return new ApiError('invalid_request', 'the request body is not valid JSON');
    return new ApiError('invalid_request', 'the request body could not be read');
  }
  return null;
}

export function errorHandler(logger: Logger) {
  return (err: unknown, req: Request, res: Response, _next: NextFunction): void => {
    const requestId = res.locals.requestId as string | undefined;
    let apiError = toApiError(err);
    if (!apiError) {
      logger.error('unhandled error', { requestId, method: req.method, path: req.path, err });
      apiError = new ApiError('internal_error', `internal error (request id ${requestId ?? 'unknown'})`);
    } else if (apiError.status >= 500) {
      logger.error('request failed', { requestId, method: req.method, path: req.path, code: apiError.code, cause: (err as Error).cause });
    }
    const context = requestContextOf(res);
    if (context) context.errorCode = apiError.code;
    if (res.headersSent) {
      res.end();
      return;
    }
    if (apiError.headers) res.set(apiError.headers);
    const body = apiError.body();
    res.status(apiError.status).json(apiError.status >= 500 && requestId !== undefined ? { ...body, request_id: requestId } : body);
  };
}

export function notFoundHandler(_req: Request, _res: Response, next: NextFunction): void {
  next(new ApiError('not_found', 'no such endpoint; see /.well-known/agent-configuration'));
}
