// The synthetic probe of the public path (§14), all real and on loopback: the service's receivers, the
// public nginx rendered by `npm run render:nginx` with a test certificate (openssl), Debian's
// prometheus-blackbox-exporter with the module of deploy/prometheus/blackbox.yml (only a CA for the
// test certificate added), and a Prometheus scraping it with the job of deploy/prometheus/prometheus.yml
// and the file's probe rules (their `for:` shortened). The probe passes through nginx on the
// service's own 403; it fails when nginx is stopped and when the allow-list leaves the prober out
// (nginx's own 403), and BitrixSyncPublicProbeFailing fires, then resolves when nginx is right again.
// The test certificate lives one day: BitrixSyncPublicCertificateExpiring fires on the real
// probe_ssl_earliest_cert_expiry.
import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { type ServerType, serve } from "@hono/node-server";
import test from "ava";
import { parse } from "yaml";
import { loadConfig } from "../../src/config/env.js";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
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
import { captureLogger, inboxCount, MEMBER_ID, PORTAL_HOST, TOKENS } from "../helpers/receiver.js";
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

const MODULE = "bitrix_sync_receiver";
const PROBE_RULES = ["BitrixSyncPublicProbeFailing", "BitrixSyncPublicCertificateExpiring"];

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
    BITRIX_WEBHOOK_ALLOWED_CIDRS: "127.0.0.1/32",
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
const firing = async (p: RunningPrometheus, name: string) =>
  (await p.api<{ alerts: Alert[] }>("alerts")).alerts.filter(
    (a) => a.labels.alertname === name && a.state === "firing",
  );

run(
  "the probe passes through nginx on the service's 403, and fails when nginx is down or refuses the prober",
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
    await deploy(b, port, appPort, "127.0.0.1/32", "public");
    const target = `https://localhost:${port}/bitrix/sync/webhook/contact`;

    // The module as deployed, trusting the test certificate.
    const bb = await startBlackbox(blackboxConfigWith(MODULE, { tls_config: { ca_file: b.cert } }));
    blackbox = bb;
    const ok = await bb.probe(MODULE, target);
    t.is(ok.get("probe_success"), 1, JSON.stringify(Object.fromEntries(ok)));
    t.is(ok.get("probe_http_status_code"), 403);
    t.is(ok.get("probe_http_ssl"), 1);
    const expiry = ok.get("probe_ssl_earliest_cert_expiry") ?? 0;
    t.true(
      expiry > Date.now() / 1000 && expiry < Date.now() / 1000 + 2 * 86_400,
      "the one-day test certificate",
    );
    // The 403 was the service's: a refusal for a missing token, and nothing recorded.
    t.regex(captured.text(), /"reason":"token_missing"/, "the service refused it");
    t.is(await inboxCount(d.pool), 0);

    // Prometheus with the probe job of deploy/prometheus/prometheus.yml (target and exporter address
    // this test's) and the probe rules.
    const config = parse(readFileSync(PROMETHEUS_FILE, "utf8")) as {
      scrape_configs: Array<
        { job_name: string; relabel_configs: Array<{ replacement?: string }> } & Record<string, unknown>
      >;
    };
    const job = config.scrape_configs.find((j) => j.job_name === "bitrix-sync-probe");
    if (!job) return t.fail("prometheus.yml has no bitrix-sync-probe job");
    const last = job.relabel_configs.at(-1);
    if (last) last.replacement = bb.address;
    Object.assign(job, {
      static_configs: [{ targets: [target] }],
      scrape_interval: "1s",
      scrape_timeout: "900ms",
    });
    const p = await startPrometheus(null, rulesNamed(PROBE_RULES, "1s"), [job]);
    prometheus = p;
    await waitFor(
      async () => {
        const data = await p.api<{
          activeTargets: Array<{ health: string; labels: Record<string, string> }>;
        }>("targets");
        return data.activeTargets[0]?.health === "up" && data.activeTargets[0]?.labels.instance === target;
      },
      30_000,
      "Prometheus scraping the probe",
    );
    const cert = await waitFor(
      async () => {
        const a = await firing(p, "BitrixSyncPublicCertificateExpiring");
        return a.length > 0 ? a : null;
      },
      30_000,
      "BitrixSyncPublicCertificateExpiring firing",
    );
    t.like(cert[0]?.labels, { job: "bitrix-sync-probe", instance: target, severity: "warning" });
    t.deepEqual(await firing(p, "BitrixSyncPublicProbeFailing"), [], "a healthy path fires nothing");

    // nginx stopped: nothing answers.
    await stopNginx();
    const down = await bb.probe(MODULE, target);
    t.is(down.get("probe_success"), 0);
    const alert = await waitFor(
      async () => {
        const a = await firing(p, "BitrixSyncPublicProbeFailing");
        return a.length > 0 ? a : null;
      },
      30_000,
      "BitrixSyncPublicProbeFailing firing",
    );
    t.like(alert[0]?.labels, { job: "bitrix-sync-probe", instance: target, severity: "critical" });

    // nginx back, but its allow-list no longer admits the prober: nginx's own 403, not the service's.
    await deploy(b, port, appPort, "127.0.0.2/32", "narrow");
    const refused = await bb.probe(MODULE, target);
    t.is(refused.get("probe_success"), 0);
    t.is(refused.get("probe_http_status_code"), 403, "the same status as the service's refusal");
    const access = readFileSync(join(b.dir, "narrow.access.log"), "utf8");
    t.regex(access, /"reason":"source_ip"/, "nginx refused it by source address");
    t.true((await firing(p, "BitrixSyncPublicProbeFailing")).length > 0, "still firing");

    // The allow-list right again: the probe passes and the alert resolves.
    await stopNginx();
    await deploy(b, port, appPort, "127.0.0.1/32", "fixed");
    t.is((await bb.probe(MODULE, target)).get("probe_success"), 1);
    await waitFor(
      async () => ((await firing(p, "BitrixSyncPublicProbeFailing")).length === 0 ? true : null),
      30_000,
      "BitrixSyncPublicProbeFailing resolved",
    );
  },
);
