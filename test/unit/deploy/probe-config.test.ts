// The synthetic probe's configuration (deploy/prometheus/blackbox.yml, prometheus.yml, compose.yaml):
// the files are what promtool and the exporter accept, the scrape jobs use the modules and the job
// names the rules expect, the modules hold no secret, and the difference the outsider module relies
// on holds: the service's refusal carries Cache-Control: no-store, nginx's own refusal pages do not.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import test from "ava";
import type pg from "pg";
import { parse } from "yaml";
import { renderNginx } from "../../../src/config/nginx.js";
import { createApp } from "../../../src/http/app.js";
import { projectRoot } from "../../../src/local/project-root.js";
import {
  BLACKBOX_BIN,
  BLACKBOX_FILE,
  blackboxModules,
  hasBlackbox,
  PROMETHEUS_FILE,
} from "../../helpers/blackbox.js";
import { alertRules, hasPromtool } from "../../helpers/prometheus.js";
import { captureLogger, receiverConfigFor } from "../../helpers/receiver.js";

const MODULE = "bitrix_sync_outsider";
const TLS_MODULE = "bitrix_sync_tls";

interface Job {
  job_name: string;
  metrics_path?: string;
  params?: Record<string, string[]>;
  relabel_configs?: Array<Record<string, unknown>>;
}
const prometheus = parse(readFileSync(PROMETHEUS_FILE, "utf8")) as {
  scrape_configs: Job[];
  rule_files: string[];
};

(hasPromtool ? test : test.skip)(
  "promtool accepts deploy/prometheus/prometheus.yml and its rule file",
  (t) => {
    const r = spawnSync("promtool", ["check", "config", PROMETHEUS_FILE], {
      encoding: "utf8",
      cwd: dirname(PROMETHEUS_FILE),
    });
    t.is(r.status, 0, r.stdout + r.stderr);
  },
);

(hasBlackbox ? test : test.skip)("the blackbox exporter accepts deploy/prometheus/blackbox.yml", (t) => {
  const r = spawnSync(BLACKBOX_BIN as string, ["--config.check", `--config.file=${BLACKBOX_FILE}`], {
    encoding: "utf8",
  });
  t.is(r.status, 0, r.stdout + r.stderr);
});

test("the scrape jobs are the ones the rules name; each probe job asks for a module that exists", (t) => {
  const names = prometheus.scrape_configs.map((j) => j.job_name).sort();
  t.deepEqual(names, ["bitrix-sync", "bitrix-sync-probe", "bitrix-sync-tls"]);
  for (const [job, module] of [
    ["bitrix-sync-probe", MODULE],
    ["bitrix-sync-tls", TLS_MODULE],
  ] as const) {
    const probe = prometheus.scrape_configs.find((j) => j.job_name === job) as Job;
    t.is(probe.metrics_path, "/probe", job);
    t.deepEqual(probe.params?.module, [module], job);
    t.truthy(blackboxModules().modules[module], module);
  }
  const exprs = alertRules().map((r) => r.expr);
  t.true(exprs.some((e) => e.includes('probe_success{job=~"bitrix-sync-probe|bitrix-sync-tls"}')));
  t.true(exprs.some((e) => e.includes('probe_success{job="bitrix-sync-probe"}')));
  t.true(exprs.some((e) => e.includes('probe_ssl_earliest_cert_expiry{job="bitrix-sync-tls"}')));
  t.deepEqual(prometheus.rule_files, ["bitrix-sync.rules.yml"]);
});

test("the outsider module expects nginx's own refusal over verified HTTPS, never the service's answer", (t) => {
  const m = blackboxModules().modules[MODULE];
  const http = m?.http as Record<string, unknown>;
  t.is(m?.prober, "http");
  t.is(http.method, "GET");
  t.deepEqual(http.valid_status_codes, [403]);
  t.is(http.fail_if_not_ssl, true);
  t.is(http.follow_redirects, false);
  t.is((http.tls_config as { insecure_skip_verify?: boolean } | undefined)?.insecure_skip_verify, undefined);
  t.deepEqual(http.fail_if_body_not_matches_regexp, ['^\\{"error":"forbidden"\\}$']);
  t.deepEqual(http.fail_if_header_matches, [
    { header: "Cache-Control", regexp: "no-store", allow_missing: true },
  ]);
  const text = readFileSync(BLACKBOX_FILE, "utf8");
  t.notRegex(text, /token=|bearer_token|basic_auth|password/i, "no credential in the prober");
  // The target is the public host's root: a path that is no receiver, so the probe's refusals count
  // as receiver none and never look like a robot's (BitrixSyncWebhookSourcesRefused).
  const probe = prometheus.scrape_configs.find((j) => j.job_name === "bitrix-sync-probe") as Job & {
    static_configs: Array<{ targets: string[] }>;
  };
  for (const target of probe.static_configs.flatMap((c) => c.targets)) t.is(new URL(target).pathname, "/");
});

test("the TLS module completes a verified handshake and nothing else", (t) => {
  const m = blackboxModules().modules[TLS_MODULE] as { prober: string; tcp?: Record<string, unknown> };
  t.is(m.prober, "tcp");
  t.is(m.tcp?.tls, true);
  t.is(
    (m.tcp?.tls_config as { insecure_skip_verify?: boolean } | undefined)?.insecure_skip_verify,
    undefined,
  );
  t.is(m.tcp?.query_response, undefined);
});

test("the service's 403 carries Cache-Control: no-store; nginx's own refusal pages do not", async (t) => {
  // No database: the refusal comes before anything is written.
  const app = createApp({
    pool: undefined as unknown as pg.Pool,
    log: captureLogger().log,
    receiver: receiverConfigFor(),
  });
  const res = await app.request("/bitrix/sync/webhook/contact", {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: "",
  });
  t.is(res.status, 403);
  t.is(res.headers.get("cache-control"), "no-store");
  t.is(await res.text(), '{"error":"forbidden"}');
  const site = renderNginx({
    serverName: "sync.example.org",
    listen: ["443"],
    upstream: "bitrix-sync:8080",
    certificate: "/etc/nginx/tls/c.crt",
    certificateKey: "/etc/nginx/tls/c.key",
    accessLog: "/var/log/nginx/a.log",
    errorLog: "/var/log/nginx/e.log",
    maxBodyBytes: 8192,
    ratePerSec: 100,
    burst: 500,
    otherRouteRatePerMin: 30,
    otherRouteBurst: 10,
    hstsMaxAgeSec: 63072000,
    healthListen: "127.0.0.1:8081",
    allowed: [],
  });
  const from = site.indexOf("location @forbidden {");
  const forbidden = from < 0 ? "" : site.slice(from, site.indexOf("\n  }", from));
  t.regex(forbidden, /return 403 '\{"error":"forbidden"\}'/);
  t.notRegex(
    site,
    /cache-control/i,
    "a Cache-Control from nginx would make its refusal look like the service's",
  );
});

test("compose runs the exporter with the module file, on the edge network", (t) => {
  const compose = parse(readFileSync(join(projectRoot, "deploy", "compose.yaml"), "utf8"), {
    merge: true,
  }) as {
    services: Record<string, { volumes?: string[]; command?: string[] }>;
  };
  const s = compose.services["blackbox-exporter"];
  t.true(s?.volumes?.includes("./prometheus/blackbox.yml:/etc/blackbox_exporter/config.yml:ro"));
  t.true(s?.command?.includes("--config.file=/etc/blackbox_exporter/config.yml"));
});
