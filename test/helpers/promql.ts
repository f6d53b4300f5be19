// The metric names a PromQL expression reads, for checking the rules and the dashboard against what
// the service exports. A small tokenizer, not a parser: it drops strings, label matchers, range and
// subquery brackets and the label lists of by/without/on/ignoring/group_left/group_right, then keeps
// every identifier that is not a function or aggregation (followed by "("), a keyword or a number.

const KEYWORDS = new Set([
  "and",
  "or",
  "unless",
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "offset",
  "bool",
  "inf",
  "nan",
  "atan2",
]);
// Aggregations may put their by/without clause before the parenthesis: `sum by (job) (x)`.
const AGGREGATIONS = new Set([
  "sum",
  "min",
  "max",
  "avg",
  "group",
  "stddev",
  "stdvar",
  "count",
  "count_values",
  "bottomk",
  "topk",
  "quantile",
]);
const LABEL_LISTS = new Set(["by", "without", "on", "ignoring", "group_left", "group_right"]);

export function metricNames(expr: string): string[] {
  const text = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/#[^\n]*/g, " ");
  const names = new Set<string>();
  const token =
    /(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[a-zA-Z]*)|(\$[a-zA-Z_][a-zA-Z0-9_]*)|([a-zA-Z_:][a-zA-Z0-9_:]*)|(\s+)|(.)/g;
  let m: RegExpExecArray | null;
  let skipList = false;
  // biome-ignore lint/suspicious/noAssignInExpressions: a tokenizer loop
  while ((m = token.exec(text)) !== null) {
    const ident = m[3];
    if (skipList) {
      // The label list after by/without/on/...: skip to its closing parenthesis.
      if (m[5] === "(") {
        const close = text.indexOf(")", token.lastIndex);
        token.lastIndex = close < 0 ? text.length : close + 1;
        skipList = false;
        continue;
      }
      if (m[4] === undefined) skipList = false;
    }
    if (ident === undefined) continue;
    const lower = ident.toLowerCase();
    if (LABEL_LISTS.has(lower)) {
      skipList = true;
      continue;
    }
    if (KEYWORDS.has(lower) || AGGREGATIONS.has(lower)) continue;
    if (/^\s*\(/.test(text.slice(token.lastIndex))) continue; // a function or an aggregation
    names.add(ident);
  }
  return [...names].sort();
}
