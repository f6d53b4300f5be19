// A small Dockerfile reader for the tests that check the image's properties without a Docker engine:
// instructions with continuation lines joined and comments dropped, grouped by build stage, with
// ARG defaults declared before the first FROM substituted into FROM lines.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { projectRoot } from "../../src/local/project-root.js";

export interface Instruction {
  op: string;
  /** The raw argument text. */
  args: string;
  /** The exec form (`["a", "b"]`) parsed, when the arguments are a JSON array. */
  exec?: string[];
}

export interface Stage {
  image: string;
  name?: string;
  instructions: Instruction[];
}

export function readDockerfile(file = join(projectRoot, "Dockerfile")): {
  globalArgs: Record<string, string>;
  stages: Stage[];
} {
  const logical: string[] = [];
  let pending = "";
  for (const raw of readFileSync(file, "utf8").split("\n")) {
    const line = raw.trimEnd();
    if (pending === "" && /^\s*#/.test(line)) continue;
    if (/^\s*#/.test(line)) continue; // a comment inside a continued instruction
    if (line.endsWith("\\")) {
      pending += `${line.slice(0, -1)} `;
      continue;
    }
    const full = (pending + line).trim();
    pending = "";
    if (full !== "") logical.push(full);
  }
  const globalArgs: Record<string, string> = {};
  const stages: Stage[] = [];
  for (const l of logical) {
    const m = /^(\S+)\s*(.*)$/s.exec(l);
    if (!m) continue;
    const op = (m[1] as string).toUpperCase();
    const args = (m[2] as string).replace(/\s+/g, " ").trim();
    if (op === "ARG" && stages.length === 0) {
      const [k, v] = args.split("=");
      if (k) globalArgs[k] = v ?? "";
      continue;
    }
    if (op === "FROM") {
      const [image = "", as, name] = args
        .replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a, b) => globalArgs[a ?? b] ?? "")
        .split(" ");
      stages.push({ image, name: as?.toUpperCase() === "AS" ? name : undefined, instructions: [] });
      continue;
    }
    let exec: string[] | undefined;
    const jsonPart = op === "HEALTHCHECK" ? args.replace(/^.*?\bCMD\s+/, "") : args;
    if (jsonPart.startsWith("[")) {
      try {
        exec = JSON.parse(jsonPart) as string[];
      } catch {
        exec = undefined;
      }
    }
    stages.at(-1)?.instructions.push({ op, args, exec });
  }
  return { globalArgs, stages };
}

/** The Node version the image runs (`24.21.0` of `node:24.21.0-bookworm-slim@sha256:...`). */
export function imageNodeVersion(): string {
  const image = readDockerfile().globalArgs.NODE_IMAGE ?? "";
  const m = /^node:(\d+\.\d+\.\d+)-/.exec(image);
  if (!m) throw new Error(`NODE_IMAGE names no exact Node version: ${image}`);
  return m[1] as string;
}
