// SIGTERM and SIGINT for the whole life of the service. A stop asked for while the service is still
// starting (its listener, bound before the runner starts, may already have answered a healthcheck) is
// kept and carried out once the start is done: with no listener yet, Node's default action would end
// the process there, with no drain.
//
// One listener per signal, installed once, whose action changes when the start is done. Swapping
// listeners instead (off the deferring one, on the stopping one) loses a signal: removing a signal's
// last listener closes its watcher, and a signal that had arrived but was not yet dispatched (a
// SIGTERM sent the moment the start ended) is dropped with it, leaving a service that never drains.

export const STOP_SIGNALS = ["SIGTERM", "SIGINT"] as const;
export type StopSignal = (typeof STOP_SIGNALS)[number];

export interface StopSignals {
  /**
   * From now on a signal calls `stop`; a signal that came while starting calls it at once. Calls
   * after the first are ignored.
   */
  started(stop: (signal: StopSignal) => void): void;
}

/** Installs the listeners; until `started`, a signal is only kept (the first one) and `onDeferred` told. */
export function holdStopSignals(onDeferred: (signal: StopSignal) => void): StopSignals {
  let deferred: StopSignal | null = null;
  let act: (signal: StopSignal) => void = (signal) => {
    if (deferred) return;
    deferred = signal;
    onDeferred(signal);
  };
  for (const signal of STOP_SIGNALS) process.on(signal, () => act(signal));
  let isStarted = false;
  return {
    started(stop) {
      if (isStarted) return;
      isStarted = true;
      act = stop;
      if (deferred) stop(deferred);
    },
  };
}
