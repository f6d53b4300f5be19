// One problem found in the configuration: named by its variable, never by its value. Its own module
// so the checks of each part (./env.ts, ./tokens.ts) share it without importing each other.

/** A configuration problem, safe to print: the variable and the rule, never the value. */
export interface ConfigProblem {
  variable: string;
  /** invalid: a value is wrong or missing; secret_missing: a required secret is absent. */
  kind: "invalid" | "secret_missing";
  text: string;
}
