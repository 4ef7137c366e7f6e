//go:build tools

// Package tools pins pebble (Let's Encrypt's test ACME server) and pebble-challtestsrv (its
// DNS server, which answers every name with 127.0.0.1 in the tests) for
// `go build github.com/letsencrypt/pebble/v2/cmd/pebble` and `…/cmd/pebble-challtestsrv`.
package tools

import (
	_ "github.com/letsencrypt/pebble/v2/cmd/pebble"
	_ "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv"
)
