package sluice

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// callCauses are the causes a Redis call can fail with, as cause names
// them (circuit_open is no call).
var callCauses = []string{"timeout", "out_of_memory", "connection", "unavailable", "clock_skew", authCause, "other"}

// cause names the kind of a store failure, for logs and metrics
// (failureLog, the backend's error counts), with go-redis's own error
// helpers where they exist (they see errors raised
// inside a script too: "OOM ... script: ...").
func cause(err error) string {
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(err, algorithms.ErrCircuitOpen):
		return "circuit_open"
	case algorithms.IsClockSkew(err): // Redis answered: this instance's clock is off
		return "clock_skew"
	case isAuthError(err): // Redis answered: it refuses the credentials or the command
		return authCause
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case redis.IsOOMError(err), oomInScript(err):
		return "out_of_memory"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.As(err, &opErr):
		return "connection"
	case redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsClusterDownError(err),
		redis.IsMasterDownError(err), redis.IsTryAgainError(err):
		return "unavailable"
	}
	return "other"
}

// oomInScript reports Redis 6's word for an out-of-memory error raised by a
// write inside a script: "ERR @user_script: 76: -OOM command not allowed
// ..." (Redis 7 and Valkey answer "OOM ...", which redis.IsOOMError sees).
func oomInScript(err error) bool {
	return err != nil && strings.Contains(err.Error(), "-OOM command not allowed")
}
