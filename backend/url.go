package backend

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ParseURL is url.Parse made safe for several comma-separated hosts
// ("redlock://h1:6379,h2,h3:6380"), which url.Parse rejects or misreads
// depending on where ports appear. The host list is kept verbatim in u.Host
// for Hosts to split.
func ParseURL(raw string) (*url.URL, error) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return url.Parse(raw)
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	hostStart := strings.LastIndex(authority, "@") + 1
	hosts := authority[hostStart:]
	if !strings.Contains(hosts, ",") {
		return url.Parse(raw)
	}
	u, err := url.Parse(raw[:i+3] + authority[:hostStart] + "multi.invalid" + rest[end:])
	if err != nil {
		return nil, err
	}
	u.Host = hosts
	return u, nil
}

// Hosts splits the host part of a URL that may list several comma-separated
// hosts ("h1:6379,h2:6379"), which url.URL's Hostname and Port do not
// handle. A host without a port gets defaultPort. IPv6 literals must be in
// brackets. It rejects an empty list and empty entries.
func Hosts(u *url.URL, defaultPort string) ([]string, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %s URL has no host", ErrInvalidOption, u.Scheme)
	}
	var out []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, fmt.Errorf("%w: empty host in %q", ErrInvalidOption, u.Host)
		}
		host, port := h, ""
		if strings.HasPrefix(h, "[") {
			end := strings.Index(h, "]")
			if end < 0 {
				return nil, fmt.Errorf("%w: bad IPv6 host %q", ErrInvalidOption, h)
			}
			host, port = h[:end+1], strings.TrimPrefix(h[end+1:], ":")
		} else if i := strings.LastIndex(h, ":"); i >= 0 {
			host, port = h[:i], h[i+1:]
		}
		if host == "" {
			return nil, fmt.Errorf("%w: empty host name in %q", ErrInvalidOption, h)
		}
		if port == "" {
			port = defaultPort
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
			return nil, fmt.Errorf("%w: bad port in %q (want 1-65535)", ErrInvalidOption, h)
		}
		out = append(out, host+":"+port)
	}
	return out, nil
}
