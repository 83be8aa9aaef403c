package testserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// MemcachedConfig configures StartMemcached.
type MemcachedConfig struct {
	// MemoryMB is the item memory in megabytes (-m); 0 means 64.
	MemoryMB int
	// NoEvict makes the server answer "SERVER_ERROR out of memory" instead
	// of evicting items (-M).
	NoEvict bool
	// ExtraArgs are appended to the memcached command line.
	ExtraArgs []string
}

// StartMemcached starts memcached on a free loopback port (TCP only) and
// waits until it answers "version". dir (a new temporary directory if empty)
// only holds the captured output: memcached keeps no data on disk, so
// Restart starts with an empty cache.
func StartMemcached(ctx context.Context, dir string, cfg MemcachedConfig) (*Server, error) {
	bin, err := lookBinary("memcached", "memcached")
	if err != nil {
		return nil, err
	}
	s, err := newServer("memcached", dir)
	if err != nil {
		return nil, err
	}
	s.bin = bin
	mem := cfg.MemoryMB
	if mem <= 0 {
		mem = 64
	}
	extra := append([]string(nil), cfg.ExtraArgs...)
	s.args = func() []string {
		a := []string{
			"-l", "127.0.0.1",
			"-p", strconv.Itoa(s.ports[0]),
			"-U", "0",
			"-m", strconv.Itoa(mem),
		}
		if cfg.NoEvict {
			a = append(a, "-M")
		}
		if os.Geteuid() == 0 {
			a = append(a, "-u", "root")
		}
		return append(a, extra...)
	}
	s.probe = func(ctx context.Context) error { return memcachedVersion(ctx, s.addr) }
	if err := s.launch(ctx, 1); err != nil {
		return nil, err
	}
	return s, nil
}

// memcachedVersion sends "version" and expects "VERSION ...".
func memcachedVersion(ctx context.Context, addr string) error {
	line, err := memcachedCmd(ctx, addr, "version")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "VERSION ") {
		return fmt.Errorf("memcached version: unexpected reply %q", line)
	}
	return nil
}

// memcachedCmd sends one text-protocol command and returns the first reply
// line without CRLF.
func memcachedCmd(ctx context.Context, addr, cmd string) (string, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := io.WriteString(c, cmd+"\r\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}
