// Command fenced-sql runs one SQL write behind a fencing guard, for shell
// scripts under `distlock run`: the write commits only if no holder with a
// newer fencing token has written the resource, and records the token.
//
//	distlock run --backend redis://127.0.0.1:6379 --key report -- \
//	    fenced-sql --dsn "$DATABASE_URL" -- 'UPDATE report SET body = $1 WHERE id = 1' "new body"
//
// The token comes from $DISTLOCK_TOKEN and the resource name from
// $DISTLOCK_KEY, both exported by distlock run (--token and --resource
// override them). --dsn (default $DATABASE_URL) is a postgres:// URL (the
// write runs through pgx) or a go-sql-driver MySQL DSN
// (user:pass@tcp(host:3306)/db). Tokens live in the table --table (default
// distlock_fence), created if missing. The statement's arguments follow it
// as strings; placeholders are the database's ($1 or ?).
//
// Exit status: 0 written; 3 refused, a newer holder has written (nothing
// changed: stop, do not retry); 64 bad usage; 1 any other error (nothing
// committed; a retry with the same token is safe).
package main
