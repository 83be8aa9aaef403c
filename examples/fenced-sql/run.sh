#!/bin/sh
# run.sh BODY: run job.sh under the lock "report/daily".
#
# Needs distlock and fenced-sql on PATH:
#   go install github.com/distlock/distlock/cmd/distlock github.com/distlock/distlock/examples/fenced-sql
# and the environment:
#   DISTLOCK_BACKEND  a shared lock backend with fencing, e.g. redis://127.0.0.1:6379
#   DATABASE_URL      the PostgreSQL database holding the table report
#                     (CREATE TABLE report (id INT PRIMARY KEY, body TEXT); INSERT INTO report VALUES (1, ''))
#
# Exit status: job.sh's (0 written, 3 refused as stale), or distlock's own
# (75 lock not acquired in time, 76 lock lost while the job ran).
set -eu
here=$(dirname "$0")
exec distlock run --key report/daily --ttl 15s --wait 1m -- "$here/job.sh" "$@"
