package sluice

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// inErrorRoute serves its next handler as Caddy's error routes do: on a
// server with error routes (one for every site), with the error in the
// request's context.
type inErrorRoute struct{}

func (inErrorRoute) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	srv := &caddyhttp.Server{Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{{}}}}
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.ServerCtxKey, srv))
	return next.ServeHTTP(w, srv.Errors.WithError(r, caddyhttp.Error(http.StatusNotFound, errors.New("not found"))))
}

// TestRejectionInsideErrorRoutes: a rate_limit inside handle_errors answers
// its rejection itself, with its status, Retry-After and, with
// problem_details, the problem JSON, rather than handing it to the error
// routes it runs in; nothing is returned to Caddy, which would answer the
// first error's status.
func TestRejectionInsideErrorRoutes(t *testing.T) {
	for _, problem := range []bool{false, true} {
		name, options, wantType := "bare", "", ""
		if problem {
			name, options, wantType = "problem_details", "\n\tproblem_details", problemContentType
		}
		t.Run(name, func(t *testing.T) {
			h := newHandler(t, "rate_limit {"+options+"\n"+zoneCfg(uniqueZone("in-errors"), "key static", "events 1", "window 1m")+"\n}")
			if res := serveStack(t, reqOpts{}, inErrorRoute{}, h); !res.allowed() {
				t.Fatalf("first request: err %v, next %d; want passed on", res.err, res.next)
			}
			res := serveStack(t, reqOpts{}, inErrorRoute{}, h)
			if res.err != nil || res.next != 0 || res.rec.Code != http.StatusTooManyRequests {
				t.Fatalf("second request: err %v, next %d, status %d; want nil, 0, 429", res.err, res.next, res.rec.Code)
			}
			if res.header("Retry-After") == "" {
				t.Error("second request: no Retry-After, want one")
			}
			if got := res.header("Content-Type"); got != wantType {
				t.Errorf("Content-Type: got %q, want %q", got, wantType)
			}
		})
	}
}
