package algorithms

import (
	"context"
	"strings"
	"time"
)

// ListedOverride is one override in force in a zone, as an
// OverrideLister lists it.
type ListedOverride struct {
	// Hash names the key: the hash inside its store key's hash tag, as the
	// admin API's top offenders and the RateLimit header's pk show it.
	Hash string
	// Key is the expanded key the override was set for, kept only when
	// its setter asked (WithOverrideKey: the handler's log_key); else "".
	Key string
	// Override is the limit; its Burst is the capacity (Events when the
	// override was set without a burst).
	Override Override
	// ExpiresIn is how long the override lasts still, on the store's
	// clock; 0 for one that lasts until cleared.
	ExpiresIn time.Duration
}

// OverrideLister is a store that lists a zone's overrides in force, for
// the admin API's GET /rate_limit/zones/<zone>/overrides.
//
// ListOverrides returns the overrides in force of the store keys that
// start with prefix + "{" (a zone's keys: Zone.keyPrefix), by Hash in
// byte order, those after the Hash after only ("" for the first page), at
// most n (at least 1); and next, the Hash to pass as after for the following page, or
// "" when none may follow. A page holds n unless it is the last (next
// ""); the last may be empty when the overrides after the previous one
// all ended. Stores that keep an index prune it of overrides that ended
// as they read it. Implementations MUST be safe for
// concurrent use.
type OverrideLister interface {
	ListOverrides(ctx context.Context, prefix, after string, n int) (list []ListedOverride, next string, err error)
}

// overrideKeyCtx is the context key of WithOverrideKey.
type overrideKeyCtx struct{}

// WithOverrideKey returns ctx carrying expanded, the key as the operator
// gave it, for SetOverride to keep beside the override, so that
// ListOverrides can show it. The admin API passes it only where the
// zone's handler has log_key: a store keeps no key it is not given. It
// travels in the context so that every wrapper of a store (quota leases,
// the deny cache, the breaker) passes it on unchanged.
func WithOverrideKey(ctx context.Context, expanded string) context.Context {
	return context.WithValue(ctx, overrideKeyCtx{}, expanded)
}

// OverrideKeyFrom is the expanded key WithOverrideKey put in ctx, or "".
func OverrideKeyFrom(ctx context.Context) string {
	s, _ := ctx.Value(overrideKeyCtx{}).(string)
	return s
}

// KeyHash is the hash inside store key's hash tag that follows prefix
// ("<prefix>{<hash>}…"), and whether key has that form.
func KeyHash(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", false
	}
	end := strings.IndexByte(rest, '}')
	if end <= 0 {
		return "", false
	}
	return rest[:end], true
}
