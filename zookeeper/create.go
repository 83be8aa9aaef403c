package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// maxCreateAttempts bounds the creates of one attempt (parent reaped
// between calls, create lost with the connection).
const maxCreateAttempts = 10

// protectedCreate creates the ephemeral-sequential node of attempt guid
// under parent. A create whose answer is lost with the connection may have
// been applied: the children are listed (after a Sync) and the node with
// our GUID is adopted if its ephemeralOwner is our session (CURATOR-498);
// if that cannot be known, the node is deleted in the background. A parent
// reaped as an empty container is created again.
func (d *driver) protectedCreate(ctx context.Context, s *session, parent, guid string, data []byte) (string, error) {
	prefix := parent + "/" + protectedPrefix + guid + lockInfix
	var lastErr error
	for range maxCreateAttempts {
		if h := d.cfg.hooks; h != nil && h.beforeCreate != nil {
			h.beforeCreate(parent)
		}
		created, err := d.create(ctx, s, prefix, parent, guid, data)
		lastErr = err
		switch {
		case err == nil:
			return created[strings.LastIndexByte(created, '/')+1:], nil
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			return "", err // the late handler of create cleans up
		case errors.Is(err, zk.ErrNoNode):
			if err := d.ensureParent(ctx, s, parent); err != nil {
				return "", err
			}
		case errors.Is(err, zk.ErrConnectionClosed):
			// The create may have been applied.
			name, err := d.findGUID(ctx, s, parent, guid)
			if err != nil {
				d.cleanupGUIDBG(s, parent, guid)
				return "", err
			}
			if name != "" {
				return name, nil
			}
		case errors.Is(err, zk.ErrNoServer):
			// Never sent: go-zookeeper fails queued requests after
			// trying every server. Retry while the session may live.
			if err := d.pauseUnavailable(ctx, s, err); err != nil {
				return "", err
			}
		default:
			return "", d.mapErr(s, err)
		}
	}
	return "", fmt.Errorf("%w under %s %d times: %w", errCreateFailed, parent, maxCreateAttempts, lastErr)
}

// create sends one create of a lock node with prefix. If its caller stops
// waiting, the outcome is undone in the background: the node created is
// deleted, and after a connection loss (outcome unknown) every node of the
// attempt guid is.
func (d *driver) create(ctx context.Context, s *session, prefix, parent, guid string, data []byte) (string, error) {
	var created string
	d.stats.creates.Add(1)
	err := d.do(ctx, s, false, func(c *zk.Conn) error {
		var err error
		created, err = c.Create(prefix, data, zk.FlagEphemeralSequential, d.cfg.acl)
		return err
	}, func(err error) {
		switch {
		case err == nil:
			d.deleteNodeBG(s, created)
		case errors.Is(err, zk.ErrConnectionClosed):
			d.cleanupGUIDBG(s, parent, guid)
		}
	})
	if err != nil {
		return "", err // created is the late handler's: the request may still run
	}
	return created, nil
}

// pauseUnavailable waits a little before retrying a request that could not
// be sent, unless the session is lost, the driver closes or ctx ends.
func (d *driver) pauseUnavailable(ctx context.Context, s *session, err error) error {
	if d.sessionDead(s) {
		return errRestart
	}
	return d.pause(ctx, 200*time.Millisecond, func() error { return unreachable(ctx, err) })
}

// findGUID looks for the node of attempt guid after a create whose answer
// was lost. It returns its name if it exists in session s, "" if the
// create was not applied.
func (d *driver) findGUID(ctx context.Context, s *session, parent, guid string) (string, error) {
	children, err := d.syncedChildren(ctx, s, parent)
	if err != nil {
		return "", err
	}
	for _, name := range children {
		if m, ok := parseMember(name); ok && m.guid == guid {
			found, err := d.adoptNode(ctx, s, parent+"/"+name)
			if err != nil {
				return "", err
			}
			if found {
				return name, nil
			}
		}
	}
	return "", nil
}

// adoptNode reports whether the node at path, of our attempt, exists in
// session s. A node created in another session of this connection means
// ours expired: s is declared lost and errRestart returned.
func (d *driver) adoptNode(ctx context.Context, s *session, path string) (bool, error) {
	var (
		exists bool
		stat   *zk.Stat
	)
	err := d.retrying(ctx, s, func(c *zk.Conn) error {
		var err error
		exists, stat, err = c.Exists(path)
		return err
	})
	switch {
	case err != nil:
		return false, d.mapErr(s, err)
	case !exists:
		return false, nil
	case stat.EphemeralOwner == s.id:
		return true, nil
	}
	// Applied in another session of this connection: ours expired.
	d.deleteNodeBG(s, path)
	d.sessionLost(s, fmt.Sprintf("node created in session 0x%x", stat.EphemeralOwner))
	return false, errRestart
}

// ensureParent creates the key's container node, and the base path if it
// is missing.
func (d *driver) ensureParent(ctx context.Context, s *session, parent string) error {
	create := func() error {
		return d.retrying(ctx, s, func(c *zk.Conn) error {
			_, err := c.CreateContainer(parent, nil, zk.FlagContainer, d.cfg.acl)
			return err
		})
	}
	err := create()
	if errors.Is(err, zk.ErrNoNode) {
		if err := d.ensureBase(ctx, s); err != nil {
			return err
		}
		err = create()
	}
	if err == nil || errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return d.mapErr(s, err)
}

// ensureBase creates the missing components of the base path as
// persistent nodes.
func (d *driver) ensureBase(ctx context.Context, s *session) error {
	p := ""
	for _, comp := range strings.Split(d.cfg.basePath[1:], "/") {
		p += "/" + comp
		err := d.retrying(ctx, s, func(c *zk.Conn) error {
			_, err := c.Create(p, nil, zk.FlagPersistent, d.cfg.acl)
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return d.mapErr(s, err)
		}
	}
	return nil
}

// syncedChildren lists parent's children after a Sync, which lets the
// server we are connected to catch up with the leader, so that a change
// applied through another server is visible. A missing parent has none.
func (d *driver) syncedChildren(ctx context.Context, s *session, parent string) ([]string, error) {
	err := d.retrying(ctx, s, func(c *zk.Conn) error { _, err := c.Sync(parent); return err })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, d.mapErr(s, err)
	}
	var children []string
	err = d.retrying(ctx, s, func(c *zk.Conn) error {
		var err error
		children, _, err = c.Children(parent)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, d.mapErr(s, err)
	}
	return children, nil
}
