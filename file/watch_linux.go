package file

import (
	"bytes"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is the directory events that may free a lock: a lock file
// closed after being opened for writing (its holder released it, or died:
// the kernel closes its descriptors), renamed over (a forced release) or
// removed. Inspect and failed attempts open files read-only or keep their
// descriptor open, so they wake nobody.
const watchMask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE | unix.IN_CREATE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// startWatch watches dir with inotify, calling wake with the name of each
// file an event concerns and wakeAll when events were lost. It reports
// false (and waiters poll) when inotify is unavailable, for instance when
// the per-user instance limit is reached.
func startWatch(dir string, wake func(string), wakeAll func()) (stop func(), ok bool) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, false
	}
	if _, err := unix.InotifyAddWatch(fd, dir, watchMask); err != nil {
		_ = unix.Close(fd)
		return nil, false
	}
	f := os.NewFile(uintptr(fd), "inotify:"+dir) // non-blocking: Read waits in the runtime poller, Close ends it
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			dispatch(buf[:n], wake, wakeAll)
		}
	}()
	return func() { _ = f.Close(); <-done }, true
}

// dispatch decodes a buffer of inotify events.
func dispatch(b []byte, wake func(string), wakeAll func()) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		name := b[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		switch {
		case ev.Mask&(unix.IN_Q_OVERFLOW|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
			wakeAll()
		case len(name) > 0:
			wake(string(name))
		}
		b = b[end:]
	}
}
