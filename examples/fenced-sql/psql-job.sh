#!/bin/sh
# psql-job.sh BODY: job.sh without fenced-sql, with psql alone. One SQL
# statement raises the token record and writes the row, atomically: the
# data-modifying CTE "fence" yields a row only if the recorded token is not
# above $DISTLOCK_TOKEN (ON CONFLICT … WHERE re-checks the latest committed
# version after waiting for a concurrent writer), and the UPDATE joins it,
# so a stale token updates nothing. Same token table as fence.NewSQLTable.
# Run it under distlock like job.sh:
#   distlock run --key report/daily -- ./psql-job.sh "new body"
set -eu
body=${1:?usage: psql-job.sh BODY}
out=$(psql "$DATABASE_URL" -X -q -t -A -v ON_ERROR_STOP=1 \
    -v key="$DISTLOCK_KEY" -v token="$DISTLOCK_TOKEN" -v body="$body" <<'SQL'
CREATE TABLE IF NOT EXISTS distlock_fence (resource TEXT PRIMARY KEY, token BIGINT NOT NULL);
WITH fence AS (
    INSERT INTO distlock_fence AS f (resource, token) VALUES (:'key', :'token')
    ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
        WHERE f.token <= EXCLUDED.token
    RETURNING token
)
UPDATE report SET body = :'body' FROM fence WHERE report.id = 1 RETURNING 'written';
SQL
)
if [ "$out" != written ]; then
    echo "psql-job.sh: refused: a holder with a newer token than $DISTLOCK_TOKEN has written" >&2
    exit 3
fi
echo "written with token $DISTLOCK_TOKEN"
