// deploy/compose.yaml, checked without a Docker engine: the topology of §10.1 (only nginx publishes
// a port; the backend network is internal), the hardening of §16 on every service, secrets as files
// under /run/han-chat/secrets, and the order of §13/§17 (migrate as the owner, then the service).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseEnv } from "node:util";
import test from "ava";
import { parse } from "yaml";
import { cidrMatcher, parseCidrList } from "../../../src/config/cidr.js";
import { EnvSchema } from "../../../src/config/env.js";
import { SECRET_NAMES } from "../../../src/config/secrets.js";
import { projectRoot } from "../../../src/local/project-root.js";

interface Service {
  image?: string;
  build?: { context: string; dockerfile: string };
  command?: string[];
  entrypoint?: string[];
  user?: string;
  read_only?: boolean;
  cap_drop?: string[];
  cap_add?: string[];
  privileged?: boolean;
  security_opt?: string[];
  network_mode?: string;
  environment?: Record<string, string>;
  env_file?: string[];
  ports?: string[];
  tmpfs?: string[];
  volumes?: string[];
  secrets?: Array<string | { source: string; target: string }>;
  networks?: string[] | Record<string, { ipv4_address?: string; aliases?: string[] } | null>;
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test?: string[]; disable?: boolean };
}
interface Limits {
  mem_limit?: string;
  cpus?: number;
  pids_limit?: number;
}
interface Compose {
  services: Record<string, Service>;
  networks: Record<string, { internal?: boolean; ipam?: { config: Array<{ subnet: string }> } }>;
  secrets: Record<string, { file: string }>;
}

const compose = parse(readFileSync(join(projectRoot, "deploy", "compose.yaml"), "utf8"), {
  merge: true,
}) as Compose;
const services = compose.services;
const svc = (name: string) => services[name] as Service;
const networksOf = (s: Service) => (Array.isArray(s.networks) ? s.networks : Object.keys(s.networks ?? {}));
const secretTargets = (s: Service) =>
  (s.secrets ?? []).map((x) => (typeof x === "string" ? `/run/secrets/${x}` : x.target));
const envExample = parseEnv(readFileSync(join(projectRoot, ".env.example"), "utf8"));
const configExample = JSON.parse(
  readFileSync(join(projectRoot, "deploy", "config.example.json"), "utf8"),
) as {
  migration: Record<string, string>;
};
const pkg = JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as {
  scripts: Record<string, string>;
};

test("the service, its migration, nginx, PostgreSQL and the public path's prober", (t) => {
  t.deepEqual(Object.keys(services).sort(), [
    "bitrix-sync",
    "blackbox-exporter",
    "migrate",
    "nginx",
    "postgres",
  ]);
});

test("every container: read-only root, no capabilities, no new privileges, a tmpfs for /tmp", (t) => {
  for (const [name, s] of Object.entries(services)) {
    t.is(s.read_only, true, name);
    t.deepEqual(s.cap_drop, ["ALL"], name);
    t.is(s.cap_add, undefined, name);
    t.not(s.privileged, true, name);
    t.true(s.security_opt?.includes("no-new-privileges:true"), name);
    t.true(s.tmpfs?.includes("/tmp"), name);
    t.is(s.network_mode, undefined, name);
    // Pulled images: an exact version and the digest of its index; the project's own image is built
    // from the Dockerfile, whose base is pinned the same way (dockerfile.test.ts).
    t.regex(
      s.image ?? "",
      /^(?:[a-z0-9./-]+:(?:\d+(?:\.\d+){1,2}-[a-z]+|v\d+(?:\.\d+){2})@sha256:[0-9a-f]{64}|bitrix-sync:\$\{BITRIX_SYNC_IMAGE_TAG:-local\})$/,
      `${name}: pinned image`,
    );
    t.notRegex(s.image ?? "", /:latest\b|:(?:stable|mainline)\b/, `${name}: no moving tag`);
  }
  t.regex(svc("postgres").user ?? "", /^[1-9]\d*:[1-9]\d*$/);
  t.regex(svc("nginx").user ?? "", /^[1-9]\d*:[1-9]\d*$/);
  t.regex(svc("blackbox-exporter").user ?? "", /^[1-9]\d*:[1-9]\d*$/);
});

test("every pulled image is pinned by digest, and nginx is on a current stable branch", (t) => {
  const pulled = Object.entries(services).filter(([, s]) => !s.build && !s.image?.startsWith("bitrix-sync:"));
  t.deepEqual(pulled.map(([name]) => name).sort(), ["blackbox-exporter", "nginx", "postgres"]);
  for (const [name, s] of pulled) t.regex(s.image ?? "", /@sha256:[0-9a-f]{64}$/, name);
  // nginx's stable branches have an even minor version (1.26, 1.28, 1.30); odd ones are mainline.
  const minor = Number(/^nginx:1\.(\d+)\./.exec(svc("nginx").image ?? "")?.[1]);
  t.true(minor >= 30 && minor % 2 === 0, `nginx 1.${minor} is a current stable branch`);
  // The PostgreSQL of compose is the major the project is built and tested on.
  t.regex(svc("postgres").image ?? "", /^postgres:15\.\d+-/);
});

test("only nginx publishes a public port, the one its rendered config listens on", (t) => {
  for (const [name, s] of Object.entries(services)) {
    if (name !== "nginx" && name !== "blackbox-exporter") t.is(s.ports, undefined, name);
  }
  // The prober, for the monitoring on the host only.
  t.deepEqual(svc("blackbox-exporter").ports, ["127.0.0.1:9115:9115"]);
  const ports = svc("nginx").ports ?? [];
  t.deepEqual(ports, [`443:${envExample.BITRIX_SYNC_NGINX_LISTEN}`]);
});

test("a private backend network; only the service gets a way out, to the portal", (t) => {
  t.is(compose.networks.backend?.internal, true);
  t.deepEqual(networksOf(svc("postgres")), ["backend"]);
  t.deepEqual(networksOf(svc("migrate")), ["backend"]);
  t.deepEqual(networksOf(svc("bitrix-sync")).sort(), ["backend", "egress"]);
  t.deepEqual(networksOf(svc("nginx")).sort(), ["backend", "edge"]);
  t.deepEqual(networksOf(svc("blackbox-exporter")), ["edge"], "the prober reaches nginx as a robot does");
  t.not(compose.networks.egress?.internal, true);
});

test("the service believes X-Real-IP from nginx's fixed address only", (t) => {
  const nets = svc("nginx").networks as Record<string, { ipv4_address?: string }>;
  const ip = nets.backend?.ipv4_address as string;
  const subnet = parseCidrList(compose.networks.backend?.ipam?.config[0]?.subnet);
  t.true(subnet.ok && cidrMatcher(subnet.cidrs)(ip), "nginx's address is on the backend subnet");
  const env = svc("bitrix-sync").environment ?? {};
  t.is(env.BITRIX_SYNC_TRUSTED_PROXY_CIDRS, `${ip}/32`);
  t.is(envExample.BITRIX_SYNC_TRUSTED_PROXY_CIDRS, `${ip}/32`);
  t.is(envExample.BITRIX_SYNC_NGINX_UPSTREAM, `bitrix-sync:${env.PORT}`);
});

test("migrations run once as the owner, before the service starts as the runtime role", (t) => {
  const migrate = svc("migrate");
  t.deepEqual(migrate.command, ["npm", "run", "db:migrate"]);
  t.truthy(pkg.scripts["db:migrate"]);
  t.true(secretTargets(migrate).includes(migrate.environment?.MIGRATION_DATABASE_URL_FILE as string));
  t.is(migrate.depends_on?.postgres?.condition, "service_healthy");
  const service = svc("bitrix-sync");
  t.is(service.depends_on?.migrate?.condition, "service_completed_successfully");
  t.is(service.environment?.BITRIX_SYNC_MIGRATE_ON_START, "false");
  t.is(service.image, migrate.image, "the migration runs from the service's own image");
  t.deepEqual(migrate.build, { context: "..", dockerfile: "Dockerfile" });
  t.is(service.command, undefined, "the image's CMD (npm start's command) starts the service");
  t.is(service.entrypoint, undefined);
});

test("secrets are read-only files under /run/han-chat/secrets, never environment values", (t) => {
  const service = svc("bitrix-sync");
  t.deepEqual(
    secretTargets(service).sort(),
    [...SECRET_NAMES].map((n) => `/run/han-chat/secrets/${n}`).sort(),
  );
  t.is(service.environment?.BITRIX_SYNC_SECRETS_DIR, "/run/han-chat/secrets");
  t.is(service.environment?.SECRETS_SOURCE, "file");
  for (const [name, s] of Object.entries(services)) {
    for (const key of Object.keys(s.environment ?? {})) {
      t.false(
        [...SECRET_NAMES, "MIGRATION_DATABASE_URL", "POSTGRES_PASSWORD"].includes(key),
        `${name}: ${key} must be a file`,
      );
    }
    for (const x of s.secrets ?? []) {
      const source = typeof x === "string" ? x : x.source;
      t.regex(compose.secrets[source]?.file ?? "", /^\.\/secrets\/[A-Z_]+$/, `${name}: ${source}`);
    }
  }
});

test("the service's fixed environment is valid for the service's schema", (t) => {
  const env = svc("bitrix-sync").environment ?? {};
  for (const k of Object.keys(env)) t.true(k in EnvSchema.shape, k);
  t.true(EnvSchema.safeParse({ ...envExample, ...env }).success);
  t.deepEqual(svc("bitrix-sync").env_file, ["../.env"]);
});

test("nginx runs the rendered server block with the repository's main configuration", (t) => {
  const nginx = svc("nginx");
  t.deepEqual(nginx.entrypoint, ["nginx"]);
  const volumes = nginx.volumes ?? [];
  t.true(volumes.includes("./nginx/nginx.conf:/etc/nginx/nginx.conf:ro"));
  const site = volumes.find((v) => v.startsWith("./nginx/rendered/"));
  t.truthy(site);
  t.true(site?.endsWith(":ro"));
  const main = readFileSync(join(projectRoot, "deploy", "nginx", "nginx.conf"), "utf8");
  const include = /include (\S+)\/\*\.conf;/.exec(main)?.[1];
  t.true(site?.split(":")[1]?.startsWith(`${include}/`));
  t.true(volumes.includes("./tls:/etc/nginx/tls:ro"));
  t.true(envExample.BITRIX_SYNC_NGINX_TLS_CERTIFICATE?.startsWith("/etc/nginx/tls/"));
  t.is(nginx.depends_on?.["bitrix-sync"]?.condition, "service_healthy");
});

test("nginx is healthy when it answers its own loopback health endpoint, the one the rendered file listens on", (t) => {
  const check = svc("nginx").healthcheck?.test ?? [];
  t.is(check[0], "CMD");
  t.is(check[1], "curl");
  t.true(check.includes("--fail"));
  const url = new URL(check.at(-1) as string);
  t.is(url.pathname, "/nginx-health");
  t.is(url.protocol, "http:");
  t.is(url.host, envExample.BITRIX_SYNC_NGINX_HEALTH_LISTEN as string);
  t.regex(url.hostname, /^127\./, "loopback only");
});

test("the prober has a fixed address on the edge network, and neither it nor the gateway is allowed", (t) => {
  const edge = parseCidrList(compose.networks.edge?.ipam?.config[0]?.subnet);
  const nets = svc("blackbox-exporter").networks as Record<string, { ipv4_address?: string }>;
  const prober = nets.edge?.ipv4_address as string;
  t.true(edge.ok && cidrMatcher(edge.cidrs)(prober), "the prober's address is on the edge subnet");
  const allowed = parseCidrList(envExample.BITRIX_WEBHOOK_ALLOWED_CIDRS, { limitWidth: true });
  if (!allowed.ok || !edge.ok) return t.fail();
  const admits = cidrMatcher(allowed.cidrs);
  const gateway = (edge.cidrs[0]?.address ?? "").replace(/\.0$/, ".1");
  for (const a of [prober, gateway]) t.false(admits(a), `${a} must stay outside the allow-list`);
});

test("the migrations run as the dedicated owner made by bootstrap.sql, not the cluster's superuser", (t) => {
  const postgres = svc("postgres");
  const superuser = postgres.environment?.POSTGRES_USER as string;
  t.truthy(superuser);
  const owner = new URL(configExample.migration.MIGRATION_DATABASE_URL as string).username;
  t.is(owner, "bitrix_sync_owner");
  t.not(owner, superuser);
  t.true((postgres.volumes ?? []).includes("./postgres/bootstrap.sql:/etc/bitrix-sync/bootstrap.sql:ro"));
  const init = readFileSync(join(projectRoot, "deploy", "postgres", "init-roles.sh"), "utf8");
  t.regex(init, /-f \/etc\/bitrix-sync\/bootstrap\.sql/);
  // The passwords reach psql as file names only, never as values on its command line.
  t.notRegex(init, /-v \w*password=/);
  t.regex(init, /-v owner_password_file=\/run\/secrets\/bitrix_sync_owner_password/);
  t.true(secretTargets(postgres).includes("/run/secrets/bitrix_sync_owner_password"));
  const bootstrap = readFileSync(join(projectRoot, "deploy", "postgres", "bootstrap.sql"), "utf8");
  t.regex(bootstrap, /create role bitrix_sync_owner login nosuperuser/);
});

test("every container has a memory, CPU and process limit", (t) => {
  for (const [name, s] of Object.entries(services) as Array<[string, Service & Limits]>) {
    t.regex(String(s.mem_limit ?? ""), /^\d+[mg]$/, `${name}: mem_limit`);
    t.true(typeof s.cpus === "number" && s.cpus > 0 && s.cpus <= 2, `${name}: cpus`);
    t.true(
      typeof s.pids_limit === "number" && s.pids_limit > 0 && s.pids_limit <= 1024,
      `${name}: pids_limit`,
    );
  }
});

test("the service listens on its backend address only: health and metrics never on egress", (t) => {
  const service = svc("bitrix-sync");
  const nets = service.networks as Record<string, { ipv4_address?: string; aliases?: string[] }>;
  const host = service.environment?.HOST as string;
  t.is(host, nets.backend?.ipv4_address as string);
  const subnet = parseCidrList(compose.networks.backend?.ipam?.config[0]?.subnet);
  t.true(subnet.ok && cidrMatcher(subnet.cidrs)(host), "on the internal backend subnet");
  t.is(compose.networks.backend?.internal, true);
  t.deepEqual(nets.egress, {}, "egress gives the portal a way out, no fixed address to reach the service by");
  t.true(nets.backend?.aliases?.includes("bitrix-sync"), "nginx's upstream name");
  // The image's health check asks the address the service listens on.
  const check = readFileSync(join(projectRoot, "scripts", "healthcheck.mjs"), "utf8");
  t.regex(check, /process\.env\.HOST/);
});
