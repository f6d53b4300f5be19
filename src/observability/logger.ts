// JSON logs (§15): event name, service/version/revision/environment, ids and safe codes only. A line written
// inside a span carries its trace_id and span_id. Anything that could carry a secret or PII is
// redacted by key before it is written, as a second line of defence; the first is never passing such
// values to the logger at all (docs/observability.md lists the fields).
import pino from "pino";
import pretty from "pino-pretty";
import { SERVICE_REVISION, SERVICE_VERSION } from "../version.js";
import { maskPii } from "./redact.js";
import { traceLogFields } from "./tracing.js";

export type Logger = pino.Logger;

/** Keys whose values are secrets or whole request parts: replaced by [redacted]. */
const SECRET_KEYS = ["url", "webhookUrl", "token", "password", "connectionString", "body", "query"];
/** Keys whose values are personal: masked to their first two and last two characters (§15). */
const PERSONAL_KEYS = ["phone", "email", "name", "fullName", "userId", "contactId"];

const REDACT_PATHS = [
  ...[...SECRET_KEYS, ...PERSONAL_KEYS].flatMap((k) => [k, `*.${k}`]),
  "req.url",
  "req.headers.authorization",
];

const PERSONAL = new Set(PERSONAL_KEYS);

/** pino's censor: masks a personal value, redacts everything else on the list. */
function censor(value: unknown, path: string[]): unknown {
  const key = path[path.length - 1];
  if (key !== undefined && PERSONAL.has(key) && (typeof value === "string" || typeof value === "number")) {
    return maskPii(String(value));
  }
  return "[redacted]";
}

export interface LoggerOptions {
  level?: string;
  environment?: string;
  /**
   * Where lines go; tests pass a capture stream. Defaults to stdout: JSON lines, or, when stdout is a
   * terminal (someone ran `npm start` by hand), the same lines made readable by pino-pretty.
   */
  destination?: pino.DestinationStream;
}

/** One readable line per entry, for a person at a terminal; the fields are the JSON line's. */
function terminalStream(): pino.DestinationStream {
  return pretty({
    destination: 1,
    sync: true,
    colorize: true,
    translateTime: "SYS:HH:MM:ss.l",
    ignore: "pid,hostname,service",
    singleLine: true,
  });
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  return pino(
    {
      level: opts.level ?? "info",
      base: {
        service: "bitrix-sync",
        version: SERVICE_VERSION,
        // The build (src/version.ts): every line says which commit wrote it.
        revision: SERVICE_REVISION,
        env: opts.environment,
      },
      redact: { paths: REDACT_PATHS, censor },
      mixin: traceLogFields,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    opts.destination ?? (process.stdout.isTTY ? terminalStream() : undefined),
  );
}
