// Bounded waiting for the demo: every step has a deadline, and missing it names what did not happen.

/** The demo could not go on; `exitCode` is what `npm run demo` exits with. */
export class DemoError extends Error {
  override name = "DemoError";
  readonly exitCode: number;
  constructor(message: string, exitCode = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}

/**
 * Polls `probe` until it returns a value other than null/undefined/false, or throws DemoError after
 * `timeoutMs` saying `what` did not happen (with `detail()` when given: where it got stuck).
 */
export async function within<T>(
  timeoutMs: number,
  what: string,
  probe: () => Promise<T | null | undefined | false>,
  detail?: () => Promise<string | null>,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== null && v !== undefined && v !== false) return v;
    if (Date.now() > end) {
      const d = detail ? await detail().catch(() => null) : null;
      throw new DemoError(
        `${what} did not happen within ${Math.round(timeoutMs / 1000)} s${d ? ` (${d})` : ""}`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
