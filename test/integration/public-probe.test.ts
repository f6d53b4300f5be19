// The synthetic probe of the public host (§14) and the proxy's refusals, all real and on loopback: the
// service (receivers, refusal route, /metrics), the public nginx rendered by `npm run render:nginx`
// with a test certificate (openssl) and an allow-list of 127.0.0.2/32, Debian's
// prometheus-blackbox-exporter with the modules of deploy/prometheus/blackbox.yml (only a CA for the
// test certificate added), probing from 127.0.0.1, outside the allow-list, and a Prometheus scraping
// the exporter with the jobs of deploy/prometheus/prometheus.yml and the service as job bitrix-sync,
// with the file's edge rules (their `for:` shortened). The probe passes on nginx's own refusal, which
// the service counts; it fails when nginx is stopped and when the allow-list admits the prober, and
// BitrixSyncPublicProbeFailing fires, then resolves when nginx is right again. Robot calls from an
// address outside the allow-list fire BitrixSyncWebhookSourcesRefused from the service's real
// metrics. The test certificate lives one day: BitrixSyncPublicCertificateExpiring fires on the TLS
// module's real probe_ssl_earliest_cert_expiry.
import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { type ServerType, serve } from "@hono/node-server";
import test from "ava";
import { Agent, fetch as undiciFetch } from "undici";
import { parse } from "yaml";
import { loadConfig } from "../../src/config/env.js";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
import { webhookRejected } from "../../src/observability/metrics.js";
import {
  blackboxConfigWith,
  hasBlackbox,
  PROMETHEUS_FILE,
  type RunningBlackbox,
  startBlackbox,
} from "../helpers/blackbox.js";
import { waitFor } from "../helpers/e2e.js";
import {
  hasNginx,
  hasOpenssl,
  mainConfig,
  type NginxSandbox,
  nginxSandbox,
  renderNginxCli,
  startNginx,
} from "../helpers/nginx.js";
import {
  freePort,
  hasPrometheus,
  type RunningPrometheus,
  rulesNamed,
  startPrometheus,
} from "../helpers/prometheus.js";
import {
  captureLogger,
  encodeForm,
  inboxCount,
  MEMBER_ID,
  PORTAL_HOST,
  robotFields,
  TOKENS,
} from "../helpers/receiver.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

const missing = [
  hasNginx ? null : "nginx",
  hasOpenssl ? null : "openssl",
  hasBlackbox ? null : "prometheus-blackbox-exporter",
  hasPrometheus ? null : "prometheus",
].filter((x) => x !== null);
const run = missing.length === 0 ? test.serial : test.skip;
if (missing.length > 0) {
  console.warn(
    `public-probe.test.ts: SKIPPED, not installed: ${missing.join(", ")} (apt-get install -y ${missing.join(" ")})`,
  );
}

const MODULE = "bitrix_sync_outsider";
const TLS_MODULE = "bitrix_sync_tls";
const PROBE_RULES = [
  "BitrixSyncPublicProbeFailing",
  "BitrixSyncPublicCertificateExpiring",
  "BitrixSyncProxyRefusalsNotCounted",
  "BitrixSyncWebhookSourcesRefused",
];
const ALLOWED = "127.0.0.2/32";
const STRANGER = "127.0.0.3";

let box: NginxSandbox | undefined;
let db: TestDb | undefined;
let app: ServerType | undefined;
let nginx: ChildProcess | undefined;
let blackbox: RunningBlackbox | undefined;
let prometheus: RunningPrometheus | undefined;
const captured = captureLogger();

test.after.always(async () => {
  await prometheus?.stop();
  await blackbox?.stop();
  await stopNginx();
  await new Promise<void>((resolve) => (app ? app.close(() => resolve()) : resolve()));
  await db?.drop();
  box?.remove();
});

async function stopNginx() {
  const p = nginx;
  nginx = undefined;
  if (!p || p.exitCode !== null) return;
  const exited = new Promise<void>((resolve) => p.once("exit", () => resolve()));
  p.kill("SIGTERM");
  await exited;
}

/** The service's and nginx's environment, as one deployment has it. */
function environment(b: NginxSandbox, extra: Record<string, string>): Record<string, string> {
  return {
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: TOKENS.contact,
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: TOKENS.alert,
    BITRIX_SYNC_PORTAL_HOST: PORTAL_HOST,
    BITRIX_SYNC_PORTAL_MEMBER_ID: MEMBER_ID,
    BITRIX_WEBHOOK_ALLOWED_CIDRS: ALLOWED,
    BITRIX_SYNC_TRUSTED_PROXY_CIDRS: "127.0.0.1/32",
    BITRIX_SYNC_NGINX_SERVER_NAME: "localhost",
    BITRIX_SYNC_NGINX_TLS_CERTIFICATE: b.cert,
    BITRIX_SYNC_NGINX_TLS_CERTIFICATE_KEY: b.key,
    ...extra,
  };
}

/** Renders the public site with the CLI for `allowed` and starts nginx on `port`. */
async function deploy(b: NginxSandbox, port: number, appPort: number, allowed: string, name: string) {
  const site = join(b.dir, `${name}.site.conf`);
  const r = renderNginxCli(
    environment(b, {
      BITRIX_WEBHOOK_ALLOWED_CIDRS: allowed,
      BITRIX_SYNC_NGINX_LISTEN: `127.0.0.1:${port}`,
      BITRIX_SYNC_NGINX_UPSTREAM: `127.0.0.1:${appPort}`,
      BITRIX_SYNC_NGINX_ACCESS_LOG: join(b.dir, `${name}.access.log`),
      BITRIX_SYNC_NGINX_ERROR_LOG: join(b.dir, `${name}.error.log`),
      BITRIX_SYNC_NGINX_HEALTH_LISTEN: `127.0.0.1:${await freePort()}`,
    }),
    site,
  );
  if (r.status !== 0) throw new Error(`render:nginx failed: ${r.stderr}`);
  nginx = await startNginx(b, mainConfig(b, name, site), port);
}

interface Alert {
  labels: Record<string, string>;
  state: string;
}
async function rejected(receiver: string, reason: string): Promise<number> {
  const m = await webhookRejected.get();
  return m.values.find((v) => v.labels.receiver === receiver && v.labels.reason === reason)?.value ?? 0;
}

const firing = async (p: RunningPrometheus, name: string) =>
  (await p.api<{ alerts: Alert[] }>("alerts")).alerts.filter(
    (a) => a.labels.alertname === name && a.state === "firing",
  );

/** A robot's call with its token from `local`, through nginx on `port`. */
async function robotCall(port: number, local: string, id: string) {
  const agent = new Agent({ localAddress: local, connect: { rejectUnauthorized: false } });
  try {
    const res = await undiciFetch(
      `https://localhost:${port}/bitrix/sync/webhook/contact?token=${TOKENS.contact}&ID=${id}`,
      {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: encodeForm(robotFields("contact", id)),
        dispatcher: agent,
      },
    );
    await res.arrayBuffer();
    return res.status;
  } finally {
    await agent.close();
  }
}

run(
  "the probe from outside the allow-list passes on nginx's counted refusal, and fails when nginx is down or admits the prober",
  async (t) => {
    const b = nginxSandbox({ days: 1 });
    box = b;
    const d = await createTestDb();
    db = d;
    const service = createApp({
      pool: d.pool,
      log: captured.log,
      receiver: receiverConfig(loadConfig(environment(b, {}))),
    });
    await new Promise<void>((resolve) => {
      app = serve({ fetch: service.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve());
    });
    const appPort = ((app as ServerType).address() as AddressInfo).port;
    const port = await freePort();
    await deploy(b, port, appPort, ALLOWED, "public");
    const target = `https://localhost:${port}/`;
    const tlsTarget = `localhost:${port}`;

    // The modules as deployed, trusting the test certificate. The exporter connects from 127.0.0.1,
    // which the allow-list does not admit.
    const bb = await startBlackbox(
      blackboxConfigWith([MODULE, TLS_MODULE], { tls_config: { ca_file: b.cert } }),
    );
    blackbox = bb;
    const counted = await rejected("none", "source_ip");
    const ok = await bb.probe(MODULE, target);
    t.is(ok.get("probe_success"), 1, JSON.stringify(Object.fromEntries(ok)));
    t.is(ok.get("probe_http_status_code"), 403);
    t.is(ok.get("probe_http_ssl"), 1);
    t.is(await rejected("none", "source_ip"), counted + 1, "the service counted the probe's refusal");
    // nginx writes the access line in its log phase, after the answer has left: the probe can be
    // done before the line is (a CI run read an empty log here).
    const refusedLine = /"peer":"127\.0\.0\.1".*"reason":"source_ip"/;
    const accessLog = () => readFileSync(join(b.dir, "public.access.log"), "utf8");
    await waitFor(
      async () => refusedLine.test(accessLog()),
      5_000,
      "nginx's access line of the refusal",
    ).catch(() => undefined);
    t.regex(accessLog(), refusedLine);
    t.is(await inboxCount(d.pool), 0);
    const tls = await bb.probe(TLS_MODULE, tlsTarget);
    t.is(tls.get("probe_success"), 1, JSON.stringify(Object.fromEntries(tls)));
    const expiry = tls.get("probe_ssl_earliest_cert_expiry") ?? 0;
    t.true(
      expiry > Date.now() / 1000 && expiry < Date.now() / 1000 + 2 * 86_400,
      "the one-day test certificate",
    );

    // Prometheus with the probe jobs of deploy/prometheus/prometheus.yml (targets and exporter
    // address this test's), the service as job bitrix-sync, and the edge rules.
    const config = parse(readFileSync(PROMETHEUS_FILE, "utf8")) as {
      scrape_configs: Array<
        { job_name: string; relabel_configs: Array<{ replacement?: string }> } & Record<string, unknown>
      >;
    };
    const jobs = [
      ["bitrix-sync-probe", target],
      ["bitrix-sync-tls", tlsTarget],
    ].map(([name, to]) => {
      const job = config.scrape_configs.find((j) => j.job_name === name);
      if (!job) throw new Error(`prometheus.yml has no ${name} job`);
      const last = job.relabel_configs.at(-1);
      if (last) last.replacement = bb.address;
      return Object.assign(job, {
        static_configs: [{ targets: [to] }],
        scrape_interval: "1s",
        scrape_timeout: "900ms",
      });
    });
    const p = await startPrometheus(`127.0.0.1:${appPort}`, rulesNamed(PROBE_RULES, "1s"), jobs);
    prometheus = p;
    await waitFor(
      async () => {
        const data = await p.api<{
          activeTargets: Array<{ health: string; labels: Record<string, string> }>;
        }>("targets");
        return data.activeTargets.length === 3 && data.activeTargets.every((x) => x.health === "up")
          ? true
          : null;
      },
      30_000,
      "Prometheus scraping the service and both probes",
    );
    const cert = await waitFor(
      async () => {
        const a = await firing(p, "BitrixSyncPublicCertificateExpiring");
        return a.length > 0 ? a : null;
      },
      30_000,
      "BitrixSyncPublicCertificateExpiring firing",
    );
    t.like(cert[0]?.labels, { job: "bitrix-sync-tls", instance: tlsTarget, severity: "warning" });
    // A few seconds of counted probe refusals: neither the probe nor the counting is in trouble, and
    // the probe's refusals (receiver none) do not look like a robot's.
    await new Promise((r) => setTimeout(r, 3_000));
    for (const name of [
      "BitrixSyncPublicProbeFailing",
      "BitrixSyncProxyRefusalsNotCounted",
      "BitrixSyncWebhookSourcesRefused",
    ]) {
      t.deepEqual(await firing(p, name), [], `${name}: a healthy edge fires nothing`);
    }

    // Bitrix24 calls from an address the allow-list does not hold: refused, counted, and the rule on
    // the service's own metrics fires.
    for (const id of ["5101", "5102", "5103"]) t.is(await robotCall(port, STRANGER, id), 403);
    const sources = await waitFor(
      async () => {
        const a = await firing(p, "BitrixSyncWebhookSourcesRefused");
        return a.length > 0 ? a : null;
      },
      30_000,
      "BitrixSyncWebhookSourcesRefused firing",
    );
    t.like(sources[0]?.labels, { job: "bitrix-sync", receiver: "contact", severity: "warning" });

    // nginx stopped: nothing answers.
    await stopNginx();
    const down = await bb.probe(MODULE, target);
    t.is(down.get("probe_success"), 0);
    const alert = await waitFor(
      async () => {
        const a = (await firing(p, "BitrixSyncPublicProbeFailing")).filter(
          (x) => x.labels.job === "bitrix-sync-probe",
        );
        return a.length > 0 ? a : null;
      },
      30_000,
      "BitrixSyncPublicProbeFailing firing",
    );
    t.like(alert[0]?.labels, { job: "bitrix-sync-probe", instance: target, severity: "critical" });

    // nginx back, but its allow-list admits the prober (as a gateway address standing for every
    // source would): the prober is no longer refused, and the probe says so.
    await deploy(b, port, appPort, `${ALLOWED},127.0.0.1/32`, "open");
    const admitted = await bb.probe(MODULE, target);
    t.is(admitted.get("probe_success"), 0);
    t.is(admitted.get("probe_http_status_code"), 404, "admitted: the root is an unknown path");
    t.true((await firing(p, "BitrixSyncPublicProbeFailing")).length > 0, "still firing");

    // The allow-list right again: the probe passes and the alert resolves.
    await stopNginx();
    await deploy(b, port, appPort, ALLOWED, "fixed");
    t.is((await bb.probe(MODULE, target)).get("probe_success"), 1);
    await waitFor(
      async () => ((await firing(p, "BitrixSyncPublicProbeFailing")).length === 0 ? true : null),
      30_000,
      "BitrixSyncPublicProbeFailing resolved",
    );
  },
);
