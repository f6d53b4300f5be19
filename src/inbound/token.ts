// Constant-time comparison of a presented secret with the configured ones (§10.1, §16). Both sides
// are hashed with SHA-256 first, so timingSafeEqual always compares 32 bytes and the time taken
// tells nothing about the length or a prefix of the secret. Every configured secret is compared,
// matched or not, so the time does not tell which one matched either.
import { createHash, timingSafeEqual } from "node:crypto";

function digest(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

/** True when `candidate` equals one of `accepted`; undefined entries are skipped. */
export type SecretMatcher = (candidate: string) => boolean;

/** Builds a matcher over the given secrets (e.g. the current and the previous token). */
export function secretMatcher(accepted: ReadonlyArray<string | undefined>): SecretMatcher {
  const digests = accepted.filter((v): v is string => v !== undefined && v !== "").map(digest);
  return (candidate) => {
    const d = digest(candidate);
    let ok = false;
    for (const want of digests) ok = timingSafeEqual(d, want) || ok;
    return ok;
  };
}
