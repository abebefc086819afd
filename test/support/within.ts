// A bound on how long a test waits for one thing to happen.

/**
 * `promise`, or a failure naming what did not happen within `ms`: so that a client stuck retrying,
 * or a connection the server never closes, fails the test plainly instead of running into the
 * test's timeout with no word of what it waited for.
 */
export async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}
