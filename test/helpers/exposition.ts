// Reads the Prometheus text exposition of GET /metrics into families and samples, for tests.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface MetricFamily {
  name: string;
  type: string;
  help: string;
  samples: Sample[];
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** The families of an exposition by name; each sample goes to the family it belongs to. */
export function parseExposition(text: string): Map<string, MetricFamily> {
  const families = new Map<string, MetricFamily>();
  const family = (name: string) => {
    let f = families.get(name);
    if (!f) {
      f = { name, type: "untyped", help: "", samples: [] };
      families.set(name, f);
    }
    return f;
  };
  for (const line of text.split("\n")) {
    const meta = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
    if (meta) {
      const f = family(meta[2] as string);
      if (meta[1] === "TYPE") f.type = meta[3] as string;
      else f.help = meta[3] as string;
      continue;
    }
    const m = SAMPLE.exec(line);
    if (!m) continue;
    const name = m[1] as string;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(LABEL))
      labels[l[1] as string] = (l[2] as string).replace(/\\(.)/g, "$1");
    const owner =
      [...families.values()].find(
        (f) =>
          f.type === "histogram" && [`${f.name}_bucket`, `${f.name}_sum`, `${f.name}_count`].includes(name),
      ) ?? family(name);
    owner.samples.push({ name, labels, value: Number(m[3]) });
  }
  return families;
}

/** Every name a PromQL expression may use for these families (histograms: _bucket, _sum, _count). */
export function sampleNames(families: Iterable<MetricFamily>): Set<string> {
  const out = new Set<string>();
  for (const f of families) {
    out.add(f.name);
    if (f.type === "histogram") for (const s of ["_bucket", "_sum", "_count"]) out.add(f.name + s);
  }
  return out;
}
