package postgres

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/backend"
)

// Both schemes parse to the same pool settings; defaults apply; advisory
// mode sets the session limits; pass-through parameters reach pgx.
func TestParseURL(t *testing.T) {
	for _, s := range []string{"postgres", "postgresql"} {
		u, _ := url.Parse(s + "://u:p@db.example:6543/app?sslmode=require&application_name=x")
		cfg, c, err := parseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		cc := cfg.ConnConfig
		if cc.Host != "db.example" || cc.Port != 6543 || cc.Database != "app" || cc.User != "u" || cc.Password != "p" {
			t.Errorf("%s: host %s port %d db %s user %s", s, cc.Host, cc.Port, cc.Database, cc.User)
		}
		if cfg.MaxConns != DefaultMaxConns || c.Mode != string(ModeRow) || c.CreateTable || c.Table != DefaultRowTable {
			t.Errorf("%s: defaults: maxConns %d mode %s create %v table %s", s, cfg.MaxConns, c.Mode, c.CreateTable, c.Table)
		}
		if cc.RuntimeParams["application_name"] != "x" || cc.TLSConfig == nil || cc.ConnectTimeout != 5*time.Second {
			t.Errorf("%s: pass-through: %v tls %v timeout %v", s, cc.RuntimeParams, cc.TLSConfig != nil, cc.ConnectTimeout)
		}
		if _, ok := cc.RuntimeParams["idle_session_timeout"]; ok {
			t.Errorf("%s: row mode sets idle_session_timeout", s)
		}
	}
	u, _ := url.Parse("postgres://u@h/db?mode=advisory&session_timeout=8s&pool_max_conns=7&create_table=true&table=s.t")
	cfg, c, err := parseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rp := cfg.ConnConfig.RuntimeParams
	if cfg.ConnConfig.Port != 5432 || cfg.MaxConns != 7 || c.Mode != string(ModeAdvisory) || !c.CreateTable || c.Table != "s.t" {
		t.Errorf("advisory: port %d maxConns %d mode %s create %v table %s", cfg.ConnConfig.Port, cfg.MaxConns, c.Mode, c.CreateTable, c.Table)
	}
	if rp["idle_session_timeout"] != "8000" || rp["tcp_keepalives_idle"] != "4" || rp["tcp_keepalives_interval"] != "1" || rp["tcp_keepalives_count"] != "3" {
		t.Errorf("advisory session limits: %v", rp)
	}
}

// Every numeric parameter refuses out-of-range and malformed values with
// ErrInvalidOption, without panicking, and never echoes the password.
func TestParseURLNumbers(t *testing.T) {
	bad := []string{"", "-1", "0", "1e999", "99999999999999999999999", "NaN", "100h100h", "0x10", "+", " 1", "1 ", "∞", "-0s", "9223372036854775807", "-9223372036854775808ns"}
	for _, name := range []string{"keepalive", "session_timeout", "pool_max_conns", "connect_timeout"} {
		for _, v := range bad {
			u := &url.URL{Scheme: "postgres", User: url.UserPassword("u", "hunter2"), Host: "h:5432", Path: "/db", RawQuery: url.Values{name: {v}}.Encode()}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s=%q: panic %v", name, v, r)
					}
				}()
				_, _, err := parseURL(u)
				if !errors.Is(err, backend.ErrInvalidOption) {
					t.Errorf("%s=%q: %v", name, v, err)
				}
				if err != nil && strings.Contains(err.Error(), "hunter2") {
					t.Errorf("%s=%q: the error repeats the password", name, v)
				}
			}()
		}
	}
}
