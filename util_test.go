package distlock_test

import (
	"net/url"

	"github.com/distlock/distlock"
	"strconv"
)

type urlURL = url.URL

func parseURL(s string) (*url.URL, error) { return distlock.ParseURL(s) }

func atoi(s string) (int, error) { return strconv.Atoi(s) }

func itoa(i int) string { return strconv.Itoa(i) }
