// graphile-worker in library mode, with the same preset the CLI uses (graphile.config.mjs).
import { join } from "node:path";
import { Logger as GraphileLogger } from "@graphile/logger";
import { type Runner, run } from "graphile-worker";
import type pg from "pg";
import { projectRoot } from "../local/project-root.js";
import type { Logger } from "../observability/logger.js";

export interface RunnerOptions {
  pool: pg.Pool;
  log: Logger;
  concurrency?: number;
}

/** Starts the task runner (tasks/, crontab). graphile-worker's own signal handling is off: main.ts owns it. */
export async function startRunner(opts: RunnerOptions): Promise<Runner> {
  const logger = new GraphileLogger((scope) => (level, message) => {
    const fields = { event: "worker.log", task: (scope as { taskIdentifier?: string }).taskIdentifier };
    if (level === "error") opts.log.error(fields, message);
    else if (level === "warning") opts.log.warn(fields, message);
    else if (level === "info") opts.log.info(fields, message);
    else opts.log.debug(fields, message);
  });
  return await run({
    pgPool: opts.pool,
    noHandleSignals: true,
    logger,
    preset: {
      worker: {
        taskDirectory: join(projectRoot, "tasks"),
        crontabFile: join(projectRoot, "crontab"),
        fileExtensions: [".js", ".cjs", ".mjs", ".ts"],
        concurrentJobs: opts.concurrency ?? 4,
        pollInterval: 2000,
      },
    },
  });
}
