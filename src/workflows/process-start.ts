// When this process loaded the workflow code: work the database recorded before it was made by an
// earlier process, or by a service that ran on a database since restored from a backup
// (docs/runbook.md, "Restore from backup"), and is checked before it is trusted for a create.
export const PROCESS_STARTED_AT = new Date();
