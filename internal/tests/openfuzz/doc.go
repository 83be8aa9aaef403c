// Package openfuzz holds the tests that feed distlock.Open every registered
// scheme: a native fuzz test (FuzzOpen) and the table of malformed URLs
// whose password must appear in no error, and the tests of options that
// need every backend registered (WithRetryUnavailable against a real
// redis-server). Its only non-test content is
// that table, which the CLI's tests use too.
package openfuzz

import "strings"

// Marker is the password of every URL in MalformedURLs.
const Marker = "Hunter2secret"

// MalformedURLs carry Marker as a password and are wrong in some way: each
// must fail to open with an error that shows nothing of the password.
var MalformedURLs = []string{
	"redis://:" + Marker + "@127.0.0.1:notaport/0",
	"redis://:Hunter2#secret@127.0.0.1:6379/0",
	"redis://:Hunt#er2secret@127.0.0.1:6379/0",
	"redis://:123#" + Marker + "@127.0.0.1:6379/0",
	"redis://user:" + Marker + "@[::1:6379/0",
	"redis://user:" + Marker + "@127.0.0.1:6379/0%zz",
	"redis://user:" + Marker + "%zz@127.0.0.1:6379/0",
	"user:" + Marker + "@127.0.0.1:6379",
	":" + Marker + "@127.0.0.1:6379/0",
	"//user:" + Marker + "@127.0.0.1:6379/0",
	"redis://:" + Marker + "@127.0.0.1:6379/0?pool_size=-5",
	"redis://:" + Marker + "@127.0.0.1:6379/0?pool_size=100000000000",
	"redlock://:" + Marker + "@127.0.0.1:1,127.0.0.1:2/0?pool_size=-5",
	"redis://:" + Marker + "@127.0.0.1:6379/0?bogus=1",
	"redis://:" + Marker + "@127.0.0.1:6379/x",
	"redis://:" + Marker + "@127.0.0.1:6379/0#frag",
	"redis://:" + Marker + "@h1:6379,h2:6379/0",
	"rediss://:" + Marker + "@127.0.0.1:0/0",
	"redlock://:" + Marker + "@127.0.0.1:1,127.0.0.1:1/0",
	"redlock://:" + Marker + "@127.0.0.1:notaport,127.0.0.1:2/0",
	"redlock://:Hunter2/secret@127.0.0.1:1,127.0.0.1:2/0",
	"redlock://:" + Marker + "@127.0.0.1:1,127.0.0.1:2/0?node_timeout=-1s",
	"mysql://root:" + Marker + "@127.0.0.1:notaport/db",
	"mysql://root:" + Marker + "@127.0.0.1:3306/",
	"mysql://root:" + Marker + "@127.0.0.1:3306/db?maxConns=-1",
	"mysql://root:Hunter2?secret@127.0.0.1:3306/db",
	"mysql://root:" + Marker + "@127.0.0.1:1/db",
	"mysql:root:" + Marker + "@tcp(127.0.0.1:3306)/db",
	"root:" + Marker + "@tcp(127.0.0.1:3306)/db",
	"memcached://:" + Marker + "@127.0.0.1:11211",
	"zookeeper://:" + Marker + "@127.0.0.1:2181/locks",
	"zk://:" + Marker + "@[::1/locks",
	"mem://:" + Marker + "@x",
	"nosuch://:" + Marker + "@host",
	"redis://:" + Marker + "@127.0.0.1:6379/0\n",
	"redis://:" + Marker + "\x7f@127.0.0.1:6379/0",
	" redis://:" + Marker + "@127.0.0.1:6379/0",
}

// Leaks reports whether s shows the marker or a recognisable piece of it.
func Leaks(s string) bool {
	for _, piece := range []string{Marker, "Hunter2", "secret", "Hunt", "er2sec"} {
		if strings.Contains(s, piece) {
			return true
		}
	}
	return false
}
