package zookeeper

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/internal/async"
)

// Background deletion of nodes that must not stay: the node of an attempt
// that failed or gave up, the node of a create whose outcome was unknown,
// and the nodes of a session declared lost that may in fact be alive. Each
// deletion is retried until it succeeds, the node is gone, or its session
// has certainly ended (which deletes the node on the server).

// cleanupBackoff is the schedule of a background deletion's tries.
var cleanupBackoff = async.Backoff{First: 50 * time.Millisecond, Max: 2 * time.Second}

// deleteNode deletes a node of ours now if it can (bounded by ctx, the
// caller's, by the driver's closing and by min(2s, the session timeout)),
// else in the background: a caller whose ctx has ended does not wait for
// the server.
func (d *driver) deleteNode(ctx context.Context, s *session, path string) {
	if ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(ctx, min(2*time.Second, s.timeout))
		stop := context.AfterFunc(d.ctx, cancel)
		ok := d.deleteOnce(ctx, s, path)
		stop()
		cancel()
		if ok {
			return
		}
	}
	d.deleteNodeBG(s, path)
}

// deleteOnce tries to delete path once; true if it is gone.
func (d *driver) deleteOnce(ctx context.Context, s *session, path string) bool {
	err := d.do(ctx, s, false, func(c *zk.Conn) error { return c.Delete(path, -1) }, nil)
	return err == nil || errors.Is(err, zk.ErrNoNode)
}

// deleteNodeBG deletes path in the background until that succeeds, the
// node is gone, or its session has ended.
func (d *driver) deleteNodeBG(s *session, path string) {
	d.cleanupBG(s, func(ctx context.Context) bool { return d.deleteOnce(ctx, s, path) })
}

// cleanupGUIDBG deletes, in the background, every node of parent created
// by the attempt guid: the outcome of its create is unknown.
func (d *driver) cleanupGUIDBG(s *session, parent, guid string) {
	d.cleanupBG(s, func(ctx context.Context) bool {
		_ = d.do(ctx, s, false, func(c *zk.Conn) error { _, err := c.Sync(parent); return err }, nil)
		var children []string
		err := d.do(ctx, s, false, func(c *zk.Conn) error {
			var err error
			children, _, err = c.Children(parent)
			return err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			return true
		}
		if err != nil {
			return false
		}
		ok := true
		for _, name := range children {
			if m, isOurs := parseMember(name); isOurs && m.guid == guid {
				ok = d.deleteOnce(ctx, s, parent+"/"+name) && ok
			}
		}
		return ok
	})
}

// cleanupBG runs try in the background on cleanupBackoff (each try bounded
// by the session timeout) until it reports done, the session has ended, or
// the driver closes.
func (d *driver) cleanupBG(s *session, try func(ctx context.Context) bool) {
	d.spawn(func() {
		async.Retry{Schedule: cleanupBackoff, TryTimeout: s.timeout}.Do(d.ctx, func(ctx context.Context) bool {
			return d.sessionEnded(s) || try(ctx)
		})
	})
}

// sessionEnded reports whether s has certainly ended on the server side, or
// is ending: its connection moved to another session, or it was an owned
// connection that has been closed.
func (d *driver) sessionEnded(s *session) bool {
	if sid := s.conn.SessionID(); sid != s.id {
		return true
	}
	if s.info != nil {
		if si, ok := s.info.session(s.id); ok && si.expired {
			return true
		}
	}
	if d.owned {
		d.mu.Lock()
		defer d.mu.Unlock()
		return s.dead // an owned connection is closed when its session is declared lost
	}
	return false
}
