//go:build tools

// Package tools pins grpcurl for `go build github.com/fullstorydev/grpcurl/cmd/grpcurl`.
package tools

import _ "github.com/fullstorydev/grpcurl/cmd/grpcurl"
