-- One owner per decision: function comments that say what the code decides about a write that got
-- no answer (src/workflows/decide/unanswered-write.ts). No table changes.
set local lock_timeout = '10s';

-- #include sql/commands.sql
