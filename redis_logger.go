package sluice

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// go-redis logs on its own (a dial that failed, a Sentinel's new master, a
// panic it recovered) through one process-wide logger, which by default
// prints plain `redis: 2026/12/05 … pool.go:770: …` lines on stderr, in
// the middle of Caddy's JSON log. The first Redis client Sluice connects
// installs redisLogger in its place: each line goes to Caddy's log, under
// the logger rate_limit.redis, at a level read from its words, at most once
// per logInterval per kind of line (a Redis that is down would otherwise
// log a dial failure per request), with how many lines it stands for.

// redisLoggerName names go-redis's lines in Caddy's log.
const redisLoggerName = "rate_limit.redis"

// installRedisLogger makes go-redis log through Caddy's logger; once per
// process, as go-redis's logger is process-wide.
func installRedisLogger() {
	redisLoggerOnce.Do(func() {
		redis.SetLogger(newRedisLogger(func() *zap.Logger { return caddy.Log().Named(redisLoggerName) }))
	})
}

var redisLoggerOnce sync.Once

// redisLogger is go-redis's logger (its internal.Logging) writing to a zap
// logger: logger is asked for it at each line let through, so the lines
// follow Caddy's logging configuration across reloads.
type redisLogger struct {
	logger func() *zap.Logger

	mu    sync.Mutex
	kinds map[string]*throttle // by format: one per kind of line
}

// maxRedisLogKinds bounds the kinds of line kept apart; past it the rest
// share one throttle. go-redis's formats are literals in its code.
const maxRedisLogKinds = 256

func newRedisLogger(logger func() *zap.Logger) *redisLogger {
	return &redisLogger{logger: logger, kinds: make(map[string]*throttle)}
}

// Printf logs one of go-redis's lines, unless a line of its kind (its
// format) was logged less than logInterval ago: the line let through says
// how many it stands for ("lines"). The message is go-redis's, less its
// "redis: " prefix; "component" is the part of go-redis that spoke, when
// the message names one ("connection pool", "sentinel", …).
func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.printfAt(time.Now(), format, v...)
}

// printfAt is Printf at now.
func (l *redisLogger) printfAt(now time.Time, format string, v ...any) {
	n, ok := l.throttle(format).tickAt(now)
	if !ok {
		return
	}
	msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(fmt.Sprintf(format, v...)), "redis: "))
	fields := []zap.Field{zap.Int("lines", n)}
	if component, rest, found := strings.Cut(msg, ": "); found && len(component) <= 32 && !strings.ContainsAny(component, "=[{") {
		fields = append(fields, zap.String("component", component))
		msg = rest
	}
	if ce := l.logger().Check(redisLogLevel(msg), msg); ce != nil {
		ce.Write(fields...)
	}
}

// throttle is the throttle of lines of format.
func (l *redisLogger) throttle(format string) *throttle {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.kinds) >= maxRedisLogKinds {
		format = ""
	}
	t, ok := l.kinds[format]
	if !ok {
		t = &throttle{interval: logInterval}
		l.kinds[format] = t
	}
	return t
}

// redisLogLevel is the level of one of go-redis's lines, which have none:
// error for a panic it recovered, info for news of a healthy topology (a
// Sentinel's master or a sentinel found), else warning: most are a failure
// it works around (a dial, a connection dropped, a command retried).
func redisLogLevel(msg string) zapcore.Level {
	lower := strings.ToLower(msg)
	switch {
	case strings.Contains(lower, "panic"):
		return zapcore.ErrorLevel
	case strings.Contains(lower, "failed"), strings.Contains(lower, "error"):
		return zapcore.WarnLevel
	case strings.HasPrefix(lower, "new master"), strings.HasPrefix(lower, "selected addr"),
		strings.HasPrefix(lower, "discovered new sentinel"):
		return zapcore.InfoLevel
	}
	return zapcore.WarnLevel
}
