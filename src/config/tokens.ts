// Rules for the service's tokens and keys (docs/security.md, "Tokens"), checked once at startup. A
// token travels in a URL (the robots' query string) or a header, so it is URL-safe; it is long
// enough not to be guessed; and no two of them are equal, so a leaked one opens one door only and a
// rotation really replaces the old value. Messages name the variables, never a value or a length.
import type { ConfigProblem } from "./problem.js";
import type { Secrets } from "./secrets.js";

/** The secrets these rules apply to, whenever they are present. */
export const TOKEN_SECRETS = [
  "BITRIX_SYNC_CONTACT_RECEIVER_TOKEN",
  "BITRIX_SYNC_CONTACT_RECEIVER_TOKEN_PREVIOUS",
  "BITRIX_SYNC_ALERT_RECEIVER_TOKEN",
  "BITRIX_SYNC_ALERT_RECEIVER_TOKEN_PREVIOUS",
  "BITRIX_SYNC_SERVICE_TOKEN",
  "BITRIX_SYNC_HASH_KEY",
] as const;
export type TokenSecret = (typeof TOKEN_SECRETS)[number];

const TOKEN_MIN_LENGTH = 32;
/** The query limit of the receivers is 1 KiB (src/inbound/config.ts); a token must leave room for ID. */
const TOKEN_MAX_LENGTH = 512;
/** RFC 3986 unreserved characters: nothing to encode in a URL, nothing to quote in a header. */
const URL_SAFE = /^[A-Za-z0-9._~-]+$/;

const FIX = "generate one with `openssl rand -hex 32`";

/** What is wrong with the configured tokens and keys; empty when nothing is. */
export function tokenProblems(secrets: Secrets): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const invalid = (variable: string, text: string) => problems.push({ variable, kind: "invalid", text });
  const present = TOKEN_SECRETS.filter((name) => secrets[name] !== undefined);
  for (const name of present) {
    const value = secrets[name] as string;
    if (value.length < TOKEN_MIN_LENGTH || value.length > TOKEN_MAX_LENGTH) {
      invalid(name, `${name}: must be ${TOKEN_MIN_LENGTH} to ${TOKEN_MAX_LENGTH} characters long: ${FIX}`);
    } else if (!URL_SAFE.test(value)) {
      invalid(
        name,
        `${name}: may hold only the URL-safe characters A-Z a-z 0-9 - . _ ~ (no spaces, no line breaks inside): ${FIX}`,
      );
    }
  }
  for (let i = 0; i < present.length; i++) {
    for (let j = i + 1; j < present.length; j++) {
      const a = present[i] as TokenSecret;
      const b = present[j] as TokenSecret;
      if (secrets[a] === secrets[b]) {
        const rotation = b === `${a}_PREVIOUS` || a === `${b}_PREVIOUS`;
        invalid(
          b,
          rotation
            ? `${b} equals ${a}: the previous token is the one being replaced, so it must differ from the current one (or be removed once the rotation is done)`
            : `${b} equals ${a}: every token and key must be different, so one that leaks opens nothing else: ${FIX}`,
        );
      }
    }
  }
  return problems;
}
