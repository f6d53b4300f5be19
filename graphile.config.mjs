// graphile-worker CLI configuration. Operators run e.g.
//   DATABASE_URL="$BITRIX_SYNC_DATABASE_URL" PGOPTIONS='-c search_path=pg_catalog,pg_temp' \
//     NODE_OPTIONS="--import tsx" npx graphile-worker
// (the connection string through the environment, never on the command line: docs/operations.md).
// The service itself (npm start) uses the same preset in library mode (src/worker/runner.ts).
/** @type {GraphileConfig.Preset} */
const preset = {
  worker: {
    taskDirectory: `${import.meta.dirname}/tasks`,
    crontabFile: `${import.meta.dirname}/crontab`,
    fileExtensions: [".js", ".cjs", ".mjs", ".ts"],
    concurrentJobs: 4,
    pollInterval: 2000,
  },
};
export default preset;
