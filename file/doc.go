// Package file is distlock's backend on a local directory, registered as
// "file": file:///var/lock/myapp, or file:relative/dir (relative to the
// working directory); mkdir=true creates the directory. It coordinates the
// processes of one host with no server: the single-host cron job, the CI
// runner, a first try of the CLI (distlock run --backend file:///tmp/x).
//
// Each key is a lock file in the directory ("k-" and the key escaped, or
// hashed when long), held with a kernel lock on an open file description:
// an OFD lock (F_OFD_SETLK) on Linux, flock(2) on macOS and the BSDs —
// never a classic POSIX fcntl lock, which any close of the file drops.
// The kernel frees it when the holder's descriptor closes, so a process
// that dies, however it dies, frees its locks at once: SessionBound, with
// no TTL to tune (WithTTL is accepted and ignored; locks do not expire).
//
// Beside each lock file a fence file keeps the last fencing token, written
// and flushed to disk (fdatasync; F_FULLFSYNC on macOS) under the fence
// file's own lock before the token is handed out: tokens increase strictly
// per key across processes, Lockers and reboots. Every change of a lock
// file's record (holder, owner, pid, host, start time, metadata, holds)
// happens under that lock, which Inspect takes shared.
//
// ForceRelease cannot take a kernel lock from its process, so it renames a
// fresh lock file over the held one: the evicted holder keeps a lock on a
// file without a name, its lease ends at once (a directory watch on Linux,
// a 250ms check elsewhere) and its Release and Refresh return ErrNotHeld;
// the next holder takes the new file with a higher token. Lock files are
// never deleted (two small files per key stay in the directory): deleting
// one that others wait on would let two holders lock two files of one name.
//
// Capabilities: Fencing; Reentrant (per Locker: acquisitions with the same
// WithOwner id on one Locker nest, whose joins re-check that the hold's
// file is still the lock file); SessionBound; Notify on Linux, where
// waiters sleep on inotify and are woken by a release, a holder's death or
// a forced release (waiters elsewhere poll every 1 to 25ms). Not Fair:
// processes race for a released lock (within one, waiters take turns in
// arrival order, so a release wakes one waiter per process). Not Expiring.
// Not Durable: a reboot frees every lock (the tokens survive it). Semaphores keep one file per
// permit (at most MaxPermits). Inspect cannot count waiters (-1);
// Locker.Holder adds the holder's pid, host and start time.
//
// Acquire waits with non-blocking attempts, never in a blocking lock call,
// so it returns when its ctx ends and leaves no thread or descriptor
// behind; its descriptor stays open across attempts, so waiting wakes no
// one.
//
// # Where it is not safe
//
// The locks exclude the processes of one host that open the same files.
// They do not hold across hosts: on NFS, SMB/CIFS or a FUSE network
// filesystem such as sshfs, two hosts may each hold a lock (or the server
// may drop it when a client loses its lease), and New refuses the
// directories it can identify (statfs on Linux and macOS; the BSDs are not
// checked). Containers coordinate only through a directory they share by
// a bind mount of the same host filesystem; two containers with their own
// copy, or on two hosts, exclude nothing. An operator who deletes lock
// files ends their holders' leases; a fence file removed or emptied is
// continued from its lock file's record (grants draw above the token
// recorded there), but deleting both files of a key restarts its token
// counter. Windows and other systems without flock or OFD locks
// get an *UnsupportedError.
//
// (*distlock.Locker).As answers *Dir: the lock directory's Path, and Holder, which adds the holder's pid, host and start time to Inspect's answer.
package file
