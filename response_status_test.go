package sluice

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestStatusRecorder: the status a response ends with, by what the next
// handler wrote and returned; a flush streams through.
func TestStatusRecorder(t *testing.T) {
	tests := []struct {
		name  string
		write func(w http.ResponseWriter)
		err   error
		want  int
	}{
		{"written", func(w http.ResponseWriter) { w.WriteHeader(http.StatusForbidden) }, nil, http.StatusForbidden},
		{"interim then final", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusUnauthorized)
		}, nil, http.StatusUnauthorized},
		{"upgrade", func(w http.ResponseWriter) { w.WriteHeader(http.StatusSwitchingProtocols) }, nil, http.StatusSwitchingProtocols},
		{"body only", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, nil, http.StatusOK},
		{"flush only", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }, nil, http.StatusOK},
		{"written wins over the error", func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }, errors.New("late"), http.StatusOK},
		{"handler error", func(http.ResponseWriter) {}, caddyhttp.Error(http.StatusTooManyRequests, errors.New("x")), http.StatusTooManyRequests},
		{"panic", func(http.ResponseWriter) {}, errPanicked, http.StatusInternalServerError},
		{"nothing", func(http.ResponseWriter) {}, nil, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := httptest.NewRecorder()
			rec := &statusRecorder{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: inner}}
			tt.write(rec)
			if got := rec.final(tt.err); got != tt.want {
				t.Errorf("got status %d, want %d", got, tt.want)
			}
			if tt.name == "flush only" && !inner.Flushed {
				t.Error("got no flush on the inner writer, want one")
			}
		})
	}
}
