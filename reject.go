package sluice

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// denial is the zone that denies for longest and the Retry-After sent for
// it (jitter included, whole seconds).
func (h *Handler) denial(reqs []algorithms.Request, ds []algorithms.Decision) (int, time.Duration) {
	denied := -1
	var retry time.Duration
	for i, d := range ds {
		if !d.Allowed && !reqs[i].DryRun && d.RetryAfter >= retry {
			denied, retry = i, d.RetryAfter
		}
	}
	return denied, jitteredRetry(retry, h.Jitter)
}

// reject answers a request that zones[denied] denied, with Retry-After
// retry (already set), through Caddy's error handling, so that
// handle_errors can shape the response, or, with problem_details, itself.
// A flood is all rejections, so this does only what is observed: the
// event's data is built when something listens for it, and the problem
// JSON when problem_details or the placeholder asks for it.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, zones []*Zone, reqs []algorithms.Request, ds []algorithms.Decision, denied int, retry time.Duration) error {
	z := zones[denied]
	repl.Set(exceededPlaceholder, z.nameValue)
	if h.events.ShouldEmit(exceededEvent) {
		data := map[string]any{"zone": z.name, "retry_after": retry.Seconds()}
		if h.LogKey {
			data["key"] = z.expand(repl)
		}
		h.events.Emit(h.ctx, exceededEvent, data)
	}
	if h.ProblemDetails && !hasErrorRoutes(r) {
		problem := problemBody(h.Status, zones, reqs, ds, retry)
		repl.Set(problemPlaceholder, problem)
		return writeProblem(w, h.Status, problem)
	}
	repl.Set(problemPlaceholder, newLazyProblem(h.Status, zones, reqs, ds, retry))
	return rejectionError(h.Status, z.exceeded)
}
