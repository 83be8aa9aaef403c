package redisurl

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
)

// Query runs the checks every redis:// and redlock:// URL shares (no
// opaque part, no fragment, a query that parses; form is the URL's shape
// for the error) and splits its query into distlock's own parameters,
// named in own, and the rest, which go to go-redis (Node).
func Query(u *url.URL, form string, own []string) (*backend.Params, url.Values, error) {
	if u.Opaque != "" {
		return nil, nil, fmt.Errorf("%w: %s URL must look like %s, got %q", backend.ErrInvalidOption, u.Scheme, form, u.Redacted())
	}
	if u.Fragment != "" {
		return nil, nil, fmt.Errorf("%w: %s URL must not have a fragment (#%q)", backend.ErrInvalidOption, u.Scheme, u.Fragment)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s URL query: %v", backend.ErrInvalidOption, u.Scheme, err)
	}
	mine, rest := url.Values{}, url.Values{}
	for k, vs := range q {
		if slices.Contains(own, k) {
			mine[k] = vs
		} else {
			rest[k] = vs
		}
	}
	return backend.NewParams(&url.URL{RawQuery: mine.Encode()}), rest, nil
}

// Node returns go-redis's options for host (one host of u) with the query
// parameters rest, range-checked (Check). own names distlock's parameters
// for the error of a parameter go-redis does not know.
func Node(u *url.URL, host string, rest url.Values, own []string) (*goredis.Options, error) {
	gu := *u
	if gu.Scheme != "rediss" {
		gu.Scheme = "redis"
	}
	gu.Host = host
	gu.RawQuery = rest.Encode()
	o, err := goredis.ParseURL(gu.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w (distlock's own parameters: %s)", backend.ErrInvalidOption, err, strings.Join(own, ", "))
	}
	if err := Check(o); err != nil {
		return nil, err
	}
	return o, nil
}
