package sluice

import (
	"bytes"
	"context"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/jwtclaims"
)

// Placeholder prefixes of verified JWT claims: {jwt.<claim>} in keys, and
// {http.rate_limit.jwt.<claim>} for other handlers.
const (
	jwtPrefix         = "jwt."
	jwtExportedPrefix = "http.rate_limit.jwt."
)

// claimPlaceholders serves the claim placeholders of one request. The token
// is verified on the first lookup, once, however many zones use it.
type claimPlaceholders struct {
	verifier *jwtclaims.Verifier
	request  *http.Request
	claims   map[string]string
	verified bool
}

func (c *claimPlaceholders) lookup(key string) (any, bool) {
	claim, ok := strings.CutPrefix(key, jwtPrefix)
	if !ok {
		if claim, ok = strings.CutPrefix(key, jwtExportedPrefix); !ok {
			return nil, false
		}
	}
	return c.claim(claim), true
}

// claim is the verified value of claim, "" when the token did not verify
// or has no such claim.
func (c *claimPlaceholders) claim(claim string) string {
	if !c.verified {
		c.claims, c.verified = c.verifier.Claims(c.request), true
	}
	return c.claims[claim]
}

// templates is what the zones' templates of r expand with, repl being r's
// replacer: repl itself, or, when a zone names {jwt.*}, ownClaims. With a
// jwt block it also serves {http.rate_limit.jwt.*} to other handlers.
func (h *Handler) templates(r *http.Request, repl *caddy.Replacer) *caddy.Replacer {
	var claims *claimPlaceholders
	if h.verifier != nil {
		claims = &claimPlaceholders{verifier: h.verifier, request: r}
		repl.Map(claims.lookup)
	}
	if h.ownClaims {
		return ownClaims(repl, claims)
	}
	return repl
}

// usesOwnClaims reports whether a zone names a claim in a template or a
// matcher: such a handler expands them through ownClaims.
func usesOwnClaims(zones []*Zone) bool {
	for _, z := range zones {
		if z.matchClaims {
			return true
		}
		for _, template := range []string{z.Key, z.Cost, z.CostFromResponse, z.EventsPlaceholder, z.BurstPlaceholder} {
			if strings.Contains(template, "{"+jwtPrefix) || strings.Contains(template, "{"+jwtExportedPrefix) {
				return true
			}
		}
	}
	return false
}

// matchersNameClaims reports whether one of sets may name a claim: as a
// placeholder ({jwt.sub}, {http.rate_limit.jwt.sub}) or in an expression
// (ph(request, 'jwt.sub')). It errs on the side of yes, which costs a
// request copy, never a claim from another handler.
func matchersNameClaims(sets caddyhttp.RawMatcherSets) bool {
	for _, set := range sets {
		for _, raw := range set {
			if bytes.Contains(raw, []byte(jwtPrefix)) {
				return true
			}
		}
	}
	return false
}

// withReplacer is r with repl as its replacer, for matchers that read
// placeholders from the request's context.
func withReplacer(r *http.Request, repl *caddy.Replacer) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
}

// matches reports whether z's matchers match r. A zone whose matchers
// name {jwt.*} runs them on *own, r with templates as its replacer, made
// at the first such zone and kept for the request's others.
func (z *Zone) matches(r *http.Request, templates *caddy.Replacer, own **http.Request) (bool, error) {
	if z.matchClaims {
		if *own == nil {
			*own = withReplacer(r, templates)
		}
		r = *own
	}
	return z.matchers.AnyMatchWithError(r)
}

// ownClaims is the replacer a handler expands its zones' templates with
// (and runs the matchers that name {jwt.*} with):
// {jwt.*} from the handler's own verifier (claims; nil without a jwt
// block: every claim is ""), everything else from the request's replacer.
// The request's replacer alone would not do: it asks its providers in
// order, so an earlier rate_limit handler, verifying with another secret
// or not at all, would answer this handler's {jwt.*}, and a forged token
// with a fresh sub would buy a fresh bucket here. For the same reason a
// handler with a jwt block answers {http.rate_limit.jwt.*} in its own
// templates from its own verifier; a handler without one reads them as
// other handlers shared them.
func ownClaims(repl *caddy.Replacer, claims *claimPlaceholders) *caddy.Replacer {
	own := caddy.NewEmptyReplacer()
	own.Map(ownPlaceholders{repl: repl, claims: claims}.lookup)
	return own
}

// ownPlaceholders answer ownClaims' replacer: claims first, then repl.
type ownPlaceholders struct {
	repl   *caddy.Replacer
	claims *claimPlaceholders // nil: every claim is ""
}

func (o ownPlaceholders) lookup(key string) (any, bool) {
	if claim, ok := strings.CutPrefix(key, jwtPrefix); ok {
		if o.claims == nil {
			return "", true
		}
		return o.claims.claim(claim), true
	}
	if o.claims != nil {
		if claim, ok := strings.CutPrefix(key, jwtExportedPrefix); ok {
			return o.claims.claim(claim), true
		}
	}
	return o.repl.Get(key)
}
