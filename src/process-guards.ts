// The last resort (SECURITY.md): what the process does with a failure nothing else caught.
// - An unhandled promise rejection is logged (at most one line per 10 s, counting the rest) and the
//   server keeps serving. Nothing waits on a promise nobody handles, so no request is left without
//   an answer and no state is half-written by it; ending the process would let any such bug,
//   including one in a plugin, stop every agent.
// - An uncaught exception unwound a stack mid-way: whatever it was doing may be half done, so the
//   process's state can no longer be trusted. It is logged, the server stops accepting connections,
//   in-flight requests get up to SHUTDOWN_TIMEOUT_MS to finish, and the process exits with status 1 for its
//   supervisor (systemd, Kubernetes, compose's restart policy) to start a fresh one.
import { LogThrottle, type Logger } from './logger.ts';
import { describeThrown } from './common/thrown.ts';

export function installProcessGuards(logger: Logger, stopAfterFatal: () => void): void {
  const rejections = new LogThrottle(10_000);
  process.on('unhandledRejection', (reason) => {
    const notLogged = rejections.admit('unhandledRejection');
    if (notLogged === null) return;
    logger.error('unhandled promise rejection; the process keeps serving', {
      reason: describeThrown(reason), ...(notLogged > 0 ? { similarRejectionsNotLogged: notLogged } : {}),
    });
  });
  process.on('uncaughtException', (err) => {
    logger.error('uncaught exception; stopping, because the process state can no longer be trusted', { err });
    stopAfterFatal();
  });
}
