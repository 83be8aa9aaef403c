// Command quickstart shows distlock on its embedded in-process backend:
// four workers contend for one lock, each critical section gets a fencing
// token, and the tokens come out strictly increasing. Swap the URL for
// "redis://127.0.0.1:6379/0" (and the import) to run it on Redis.
package main
