// Builds pebble, Let's Encrypt's ACME test server, which the ACME tests obtain certificates
// from, with its dependencies pinned. v2.6.0 is the newest release that Go 1.21 builds (v2.7
// needs 1.22); it has RFC 9773 renewal information and a configurable certificate lifetime.
module lowlat.local/pebble

go 1.21

require github.com/letsencrypt/pebble/v2 v2.6.0

require (
	github.com/go-jose/go-jose/v4 v4.0.1 // indirect
	github.com/letsencrypt/challtestsrv v1.3.2 // indirect
	github.com/miekg/dns v1.1.58 // indirect
	golang.org/x/crypto v0.21.0 // indirect
	golang.org/x/mod v0.15.0 // indirect
	golang.org/x/net v0.23.0 // indirect
	golang.org/x/sys v0.18.0 // indirect
	golang.org/x/tools v0.18.0 // indirect
)
