// The PromQL name extraction the rules and dashboard checks rely on.
import test from "ava";
import { metricNames } from "../../helpers/promql.js";

test("metric names are found, functions, aggregations, label lists, strings and durations are not", (t) => {
  t.deepEqual(
    metricNames(
      `sum by (job, instance) (increase(bitrix_sync_crm_rate_limited_total{code=~"query_limit_exceeded|x"}[10m])) > 20`,
    ),
    ["bitrix_sync_crm_rate_limited_total"],
  );
  t.deepEqual(
    metricNames(`time() - max by (job) (bitrix_sync_worker_heartbeat_timestamp_seconds) > 120
      and on (job, instance) max without (code) (bitrix_sync_processing_enabled) == 1 or up{job="bitrix-sync"} == 0`),
    ["bitrix_sync_processing_enabled", "bitrix_sync_worker_heartbeat_timestamp_seconds", "up"],
  );
  t.deepEqual(
    metricNames(
      `histogram_quantile(0.95, sum by (le) (rate(bitrix_sync_crm_batch_duration_seconds_bucket[$__rate_interval])))`,
    ),
    ["bitrix_sync_crm_batch_duration_seconds_bucket"],
  );
  t.deepEqual(metricNames(`sum(a offset 30m) / ignoring(x) group_left b * 1e3`), ["a", "b"]);
  t.deepEqual(metricNames(`label_replace(c, "dst", "$1", "src", "(.*)")`), ["c"]);
  t.deepEqual(metricNames(`max_over_time(d[5m:1m]) unless on(job) group_left(x) e`), ["d", "e"]);
});
