// Builds h2spec (the HTTP/2 conformance suite the tests run) with its dependencies pinned, so
// that the Go in Debian 12 (1.19) builds it as well as a current one: h2spec's release has no
// go.mod, and unpinned it takes the newest golang.org/x modules, which need a newer Go.
module lowlat.local/h2spec

go 1.19

require github.com/summerwind/h2spec v2.2.1+incompatible

require (
	github.com/fatih/color v1.15.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.19 // indirect
	github.com/spf13/cobra v1.7.0 // indirect
	github.com/spf13/pflag v1.0.5 // indirect
	golang.org/x/net v0.17.0 // indirect
	golang.org/x/sys v0.13.0 // indirect
	golang.org/x/text v0.13.0 // indirect
)
