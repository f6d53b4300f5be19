// The errors a CRM call raises (§9): they carry the classification only. The CRM code never puts the
// webhook URL, a body or a reply into an error; masking for logs is ../observability/redact.ts.
import type { Classification, FailureCode, FailureKind } from "./classify.js";

/**
 * An error a CRM call raises when the caller asked for an exception instead of an outcome. It
 * carries only the classification: kind, code, HTTP status and the Bitrix error code.
 */
export class CrmError extends Error {
  override name = "CrmError";
  readonly kind: FailureKind;
  readonly code: FailureCode;
  readonly httpStatus: number | undefined;
  readonly bitrixError: string | undefined;
  readonly classification: Classification;

  constructor(c: Classification) {
    const parts = [`kind=${c.kind}`, `code=${c.code}`];
    if (c.httpStatus !== undefined) parts.push(`http=${c.httpStatus}`);
    if (c.bitrixError !== undefined) parts.push(`bitrix=${c.bitrixError}`);
    super(`CRM call failed: ${parts.join(" ")}`);
    this.kind = c.kind;
    this.code = c.code;
    this.httpStatus = c.httpStatus;
    this.bitrixError = c.bitrixError;
    this.classification = c;
  }
}

/** Raised for a CRM configuration problem at startup. The message names variables, never values. */
export class CrmConfigError extends Error {
  override name = "CrmConfigError";
}
