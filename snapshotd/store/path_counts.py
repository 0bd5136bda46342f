"""Paths per site, state and priority, kept by the database itself as paths change, so a
count reads a few rows instead of every path (SPEC 2.1).

The ``path_counts`` table holds rows of (site, state, priority, n); the count of a key is
the sum of its rows' ``n``. Triggers on ``paths`` write them, within the statement that
changes a path, so a count is exactly what a scan of ``paths`` would show:

- SQLite has one writer: a row trigger adds to the key's single row (an upsert).
- PostgreSQL has many: a statement trigger appends one row per key the statement changed
  (with its net change, from the statement's transition tables), so no two writers ever wait
  on one row. Reads fold the appended rows back into one per key once there are
  :data:`FOLD_AFTER` more than the last fold left (:data:`FOLD`, one statement; folds
  running at once each take the rows they deleted).
"""

from __future__ import annotations

__all__ = [
    "COUNTS",
    "FOLD",
    "FOLD_AFTER",
    "POSTGRES_PATH_COUNTS",
    "PROCESSED",
    "QUEUE_DEPTH",
    "SITE_COUNTS",
    "SITE_SIZE",
    "SQLITE_PATH_COUNTS",
]

_TABLE = """
    CREATE TABLE path_counts (
        site     TEXT    NOT NULL,
        state    TEXT    NOT NULL,
        priority INTEGER NOT NULL,
        n        BIGINT  NOT NULL{key}
    ){options};
"""
_FILL = (
    "INSERT INTO path_counts (site, state, priority, n) "
    "SELECT site, state, priority, COUNT(*) FROM paths GROUP BY site, state, priority;"
)

_SQLITE_ADD = (
    "INSERT INTO path_counts (site, state, priority, n) "
    "VALUES (new.site, new.state, new.priority, 1) "
    "ON CONFLICT (site, state, priority) DO UPDATE SET n = n + 1;"
)
_SQLITE_TAKE = (
    "UPDATE path_counts SET n = n - 1 "
    "WHERE site = old.site AND state = old.state AND priority = old.priority;"
)
SQLITE_PATH_COUNTS = (
    _TABLE.format(key=",\n        PRIMARY KEY (site, state, priority)", options=" WITHOUT ROWID")
    + _FILL
    + f"""
    CREATE TRIGGER path_counts_insert AFTER INSERT ON paths BEGIN {_SQLITE_ADD} END;
    CREATE TRIGGER path_counts_delete AFTER DELETE ON paths BEGIN {_SQLITE_TAKE} END;
    CREATE TRIGGER path_counts_update AFTER UPDATE OF site, state, priority ON paths
    WHEN old.site IS NOT new.site OR old.state IS NOT new.state
        OR old.priority IS NOT new.priority
    BEGIN {_SQLITE_TAKE} {_SQLITE_ADD} END;
    """
)

POSTGRES_PATH_COUNTS = (
    # Writers wait until the counts are filled, so none is missed or counted twice.
    "LOCK TABLE paths IN SHARE ROW EXCLUSIVE MODE;"
    + _TABLE.format(key="", options="")
    + _FILL
    + """
    CREATE FUNCTION path_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO path_counts (site, state, priority, n)
            SELECT site, state, priority, COUNT(*) FROM new_paths
            GROUP BY site, state, priority;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO path_counts (site, state, priority, n)
            SELECT site, state, priority, -COUNT(*) FROM old_paths
            GROUP BY site, state, priority;
        ELSE
            INSERT INTO path_counts (site, state, priority, n)
            SELECT site, state, priority, SUM(n) FROM (
                SELECT site, state, priority, 1 AS n FROM new_paths
                UNION ALL
                SELECT site, state, priority, -1 AS n FROM old_paths
            ) AS change
            GROUP BY site, state, priority HAVING SUM(n) <> 0;
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER path_counts_insert AFTER INSERT ON paths
        REFERENCING NEW TABLE AS new_paths
        FOR EACH STATEMENT EXECUTE FUNCTION path_counts_change();
    CREATE TRIGGER path_counts_update AFTER UPDATE ON paths
        REFERENCING OLD TABLE AS old_paths NEW TABLE AS new_paths
        FOR EACH STATEMENT EXECUTE FUNCTION path_counts_change();
    CREATE TRIGGER path_counts_delete AFTER DELETE ON paths
        REFERENCING OLD TABLE AS old_paths
        FOR EACH STATEMENT EXECUTE FUNCTION path_counts_change();
    """
)

# Each read's last column is the number of rows it summed, which tells when to fold.
_SUM = "CAST(COALESCE(SUM(n), 0) AS BIGINT)"  # PostgreSQL's SUM of BIGINT is NUMERIC
COUNTS = (
    f"SELECT site, state, {_SUM}, COUNT(*) FROM path_counts GROUP BY site, state "
    "HAVING SUM(n) <> 0"
)
SITE_COUNTS = (
    f"SELECT site, state, {_SUM}, COUNT(*) FROM path_counts WHERE site = {{0}}1 "
    "GROUP BY site, state HAVING SUM(n) <> 0"
)
QUEUE_DEPTH = (
    f"SELECT priority, {_SUM}, COUNT(*) FROM path_counts WHERE state = 'pending' "
    "GROUP BY priority"
)
SITE_SIZE = f"SELECT {_SUM}, COUNT(*) FROM path_counts WHERE site = {{0}}1"
PROCESSED = (
    f"SELECT {_SUM}, COUNT(*) FROM path_counts WHERE site = {{0}}1 AND state = 'processed'"
)

# PostgreSQL: a read that summed this many more rows than the last fold left folds them.
FOLD_AFTER = 1000
FOLD = """
    WITH taken AS (DELETE FROM path_counts RETURNING site, state, priority, n)
    INSERT INTO path_counts (site, state, priority, n)
    SELECT site, state, priority, SUM(n) FROM taken
    GROUP BY site, state, priority HAVING SUM(n) <> 0
"""
