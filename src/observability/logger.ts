// JSON logs (§15): event name, service/version/environment, ids and safe codes only. Anything that
// could carry a secret or PII is redacted by key before it is written, as a second line of defence;
// the first is never passing such values to the logger at all.
import pino from "pino";

export type Logger = pino.Logger;

export const REDACT_PATHS = [
  "url",
  "*.url",
  "webhookUrl",
  "*.webhookUrl",
  "token",
  "*.token",
  "password",
  "*.password",
  "connectionString",
  "*.connectionString",
  "body",
  "*.body",
  "query",
  "*.query",
  "phone",
  "*.phone",
  "email",
  "*.email",
  "req.url",
  "req.headers.authorization",
];

export interface LoggerOptions {
  level?: string;
  environment?: string;
  /** Where lines go; tests pass a capture stream. Defaults to stdout. */
  destination?: pino.DestinationStream;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  return pino(
    {
      level: opts.level ?? "info",
      base: {
        service: "bitrix-sync",
        version: process.env.npm_package_version ?? "0.1.0",
        env: opts.environment,
      },
      redact: { paths: REDACT_PATHS, censor: "[redacted]" },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    opts.destination,
  );
}
