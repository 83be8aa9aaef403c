#!/bin/sh
# job.sh BODY: the work done under the lock. It writes BODY into row 1 of
# the table report through fenced-sql, which takes the fencing token from
# $DISTLOCK_TOKEN and the resource name from $DISTLOCK_KEY (distlock run
# exports both). If this process was paused past its lease and another
# holder has written since, the write is refused (exit 3) and the newer
# report stays.
set -eu
body=${1:?usage: job.sh BODY}
# ... the long part of the job would go here (render the report) ...
exec fenced-sql -- 'UPDATE report SET body = $1 WHERE id = 1' "$body"
