package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// verboseLogger is the Locker logger (distlock.WithLogger) of a command
// run with -v: each record at Info or above becomes one line on w,
// "distlock CMD: message: err (key=value ...)", so that an outage being
// waited out, a failing refresh or a lost lease shows as it happens.
func verboseLogger(w io.Writer, cmd string) *slog.Logger {
	return slog.New(&lineHandler{w: w, prefix: "distlock " + cmd + ": ", mu: &sync.Mutex{}})
}

type lineHandler struct {
	w      io.Writer
	prefix string
	mu     *sync.Mutex // shared by the handlers WithAttrs makes
	attrs  []slog.Attr
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.prefix)
	b.WriteString(strings.TrimPrefix(r.Message, "distlock: "))
	var errText string
	var kv []string
	add := func(a slog.Attr) bool {
		switch a.Key {
		case "err":
			if err, ok := a.Value.Any().(error); ok {
				errText = errLine(err)
			} else {
				errText = oneLine(a.Value.String())
			}
		case "backend", "owner":
		default:
			kv = append(kv, a.Key+"="+oneLine(a.Value.String()))
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	if errText != "" {
		b.WriteString(": " + errText)
	}
	if len(kv) > 0 {
		b.WriteString(" (" + strings.Join(kv, " ") + ")")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := fmt.Fprintln(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *lineHandler) WithGroup(string) slog.Handler { return h }
