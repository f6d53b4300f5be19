// The HTTP layer to Bitrix24 (§8, §16): one JSON POST per REST call through an undici Agent, no
// redirects, one deadline per call, and an answer that says whether the request bytes had left when
// it failed (the difference between `transient` and `uncertain` for a write, §7.2). It never
// throws for HTTP or network trouble and never puts the webhook URL, a body or a reply into an error
// or a log line: what comes back is a status, a parsed body, or a fixed error code.
import { Agent, type Dispatcher } from "undici";
import { CrmConfigError } from "./redact.js";

/** The transport's view of one call. */
export type HttpResult =
  /** A reply. `body` is the parsed JSON, or null for a 3xx/4xx/5xx whose body was not JSON. */
  | { type: "reply"; status: number; body: unknown; elapsedMs: number }
  /** A 2xx whose body was not JSON (or too large). */
  | { type: "malformed"; status: number; elapsedMs: number }
  /** No reply. `sent`: the whole request had been written to the socket. */
  | { type: "network"; sent: boolean; code: string; elapsedMs: number };

/** The portal answered (HTTP 2xx, JSON): what readiness counts as a success (§14). */
export function isAnswered(r: HttpResult | undefined): boolean {
  return r?.type === "reply" && r.status >= 200 && r.status < 300;
}

export interface CrmClientOptions {
  /** BITRIX_SYNC_CRM_REST_WEBHOOK_URL: `https://<portal>/rest/<user>/<secret>/`. A secret. */
  webhookUrl: string;
  /** BITRIX_SYNC_PORTAL_HOST: must equal the URL's host (and port, if any). */
  portalHost: string;
  /** BITRIX_SYNC_HTTP_TIMEOUT_SEC in ms: the deadline of one call, connect to last byte. */
  timeoutMs: number;
  /** Replies larger than this are treated as malformed. Default 16 MiB. */
  maxResponseBytes?: number;
  userAgent?: string;
}

/** The single way the service talks HTTP to the CRM. */
export interface CrmClient {
  /** Host (and port) of the approved portal; safe to log. */
  readonly portalHost: string;
  /** POSTs `params` as JSON to REST `method`. Resolves with what happened; rejects only on misuse. */
  call(method: string, params: object, opts?: { signal?: AbortSignal }): Promise<HttpResult>;
  /** Closes idle connections. */
  close(): Promise<void>;
}

const LOOPBACK_NAMES = new Set(["localhost", "[::1]", "::1"]);

/** 127.0.0.0/8, ::1 and localhost: the only hosts plain HTTP may be used with (sandbox, tests). */
export function isLoopbackHost(hostname: string): boolean {
  const h = hostname.toLowerCase();
  if (LOOPBACK_NAMES.has(h)) return true;
  const m = /^127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(h);
  return m?.slice(1).every((o) => Number(o) <= 255) ?? false;
}

const METHOD_NAME = /^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$/i;

/**
 * Checks the webhook URL against §12.2/§16 and returns where to send calls. Error messages name the
 * variable and the rule, never the URL or any part of its path.
 */
export function parseWebhookUrl(
  webhookUrl: string,
  portalHost: string,
): { origin: string; basePath: string } {
  let u: URL;
  try {
    u = new URL(webhookUrl);
  } catch {
    throw new CrmConfigError("BITRIX_SYNC_CRM_REST_WEBHOOK_URL is not a valid URL");
  }
  if (u.protocol !== "https:" && !(u.protocol === "http:" && isLoopbackHost(u.hostname))) {
    throw new CrmConfigError(
      "BITRIX_SYNC_CRM_REST_WEBHOOK_URL must use https (plain http is allowed only for loopback hosts)",
    );
  }
  if (u.username !== "" || u.password !== "") {
    throw new CrmConfigError("BITRIX_SYNC_CRM_REST_WEBHOOK_URL must not carry user info");
  }
  if (u.search !== "" || u.hash !== "") {
    throw new CrmConfigError("BITRIX_SYNC_CRM_REST_WEBHOOK_URL must not have a query string or fragment");
  }
  if (u.host.toLowerCase() !== portalHost.toLowerCase()) {
    throw new CrmConfigError(
      `the host of BITRIX_SYNC_CRM_REST_WEBHOOK_URL does not equal BITRIX_SYNC_PORTAL_HOST (${portalHost})`,
    );
  }
  if (!/^\/rest\/\d+\/[A-Za-z0-9_-]+\/?$/.test(u.pathname)) {
    throw new CrmConfigError(
      "BITRIX_SYNC_CRM_REST_WEBHOOK_URL must look like https://<portal>/rest/<user id>/<webhook code>/",
    );
  }
  return { origin: u.origin, basePath: u.pathname.endsWith("/") ? u.pathname : `${u.pathname}/` };
}

/** Creates the client; validates the URL first (throws CrmConfigError). */
export function createCrmClient(opts: CrmClientOptions): CrmClient {
  const { origin, basePath } = parseWebhookUrl(opts.webhookUrl, opts.portalHost);
  const timeoutMs = opts.timeoutMs;
  const maxBytes = opts.maxResponseBytes ?? 16 * 1024 * 1024;
  const userAgent = opts.userAgent ?? "bitrix-sync/0.1";
  // undici's request() never follows redirects unless a redirect interceptor is composed in; the
  // raw dispatcher below certainly does not (§16: a 302 means the portal moved, a config error).
  const agent = new Agent({
    connect: { timeout: timeoutMs, rejectUnauthorized: true },
    headersTimeout: timeoutMs + 1000,
    bodyTimeout: timeoutMs + 1000,
    keepAliveTimeout: 4000,
    connections: 8,
  });

  function call(
    method: string,
    params: object,
    callOpts: { signal?: AbortSignal } = {},
  ): Promise<HttpResult> {
    if (!METHOD_NAME.test(method)) throw new TypeError("not a REST method name");
    const body = JSON.stringify(params);
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    return new Promise<HttpResult>((resolve) => {
      let sent = false;
      let done = false;
      let status = 0;
      let size = 0;
      let abort: ((reason?: Error) => void) | null = null;
      let abortReason: string | null = null;
      const chunks: Buffer[] = [];

      const finish = (r: HttpResult) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        callOpts.signal?.removeEventListener("abort", onSignal);
        resolve(r);
      };
      const stop = (code: string) => {
        abortReason ??= code;
        const err = Object.assign(new Error(code), { code });
        if (abort) abort(err);
      };
      const onSignal = () => stop("CLIENT_ABORTED");
      const timer = setTimeout(() => stop("CLIENT_TIMEOUT"), timeoutMs);
      callOpts.signal?.addEventListener("abort", onSignal, { once: true });
      if (callOpts.signal?.aborted) stop("CLIENT_ABORTED");

      // onRequestSent is part of undici's (legacy) handler protocol but missing from its typings.
      const handler: Dispatcher.DispatchHandler & { onRequestSent(): void } = {
        onConnect(a) {
          abort = a;
          if (abortReason) {
            const err = Object.assign(new Error(abortReason), { code: abortReason });
            a(err);
          }
        },
        onRequestSent() {
          sent = true;
        },
        onHeaders(statusCode) {
          status = statusCode;
          return true;
        },
        onData(chunk) {
          size += chunk.length;
          if (size > maxBytes) {
            stop("RESPONSE_TOO_LARGE");
            return false;
          }
          chunks.push(chunk);
          return true;
        },
        onComplete() {
          const text = Buffer.concat(chunks).toString("utf8");
          if (status >= 300 && status <= 399) {
            finish({ type: "reply", status, body: null, elapsedMs: elapsed() });
            return;
          }
          let parsed: unknown;
          try {
            parsed = JSON.parse(text);
          } catch {
            if (status >= 200 && status <= 299) finish({ type: "malformed", status, elapsedMs: elapsed() });
            else finish({ type: "reply", status, body: null, elapsedMs: elapsed() });
            return;
          }
          finish({ type: "reply", status, body: parsed, elapsedMs: elapsed() });
        },
        onError(err) {
          const code = abortReason ?? (err as { code?: unknown }).code;
          if (abortReason === "RESPONSE_TOO_LARGE") {
            finish({ type: "malformed", status, elapsedMs: elapsed() });
            return;
          }
          // A reply had started (status known) but broke off: the request had certainly arrived.
          finish({
            type: "network",
            sent: sent || status !== 0,
            code: typeof code === "string" && /^[A-Z0-9_]{1,64}$/.test(code) ? code : "NETWORK_ERROR",
            elapsedMs: elapsed(),
          });
        },
      };
      try {
        agent.dispatch(
          {
            origin,
            path: `${basePath}${method}`,
            method: "POST",
            body,
            headers: {
              "content-type": "application/json",
              accept: "application/json",
              "user-agent": userAgent,
            },
          },
          handler,
        );
      } catch {
        finish({ type: "network", sent: false, code: "DISPATCH_FAILED", elapsedMs: elapsed() });
      }
    });
  }

  return {
    portalHost: opts.portalHost,
    call,
    async close() {
      await agent.close();
    },
  };
}
