package distlock

// ParseURL exposes parseURL to the external tests.
var ParseURL = parseURL
