package integration_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// tlsSite is a site whose one zone admits 3 requests per X-Key, deciding on
// the Redis behind the given redis block lines, and failing closed. The
// first decision dials and does the TLS handshake within its timeout; on a
// busy machine that takes more than the default 100ms, and failing closed
// would make it a 503, so the timeout is generous: this test is about TLS.
func tlsSite(redisLines ...string) string {
	var b strings.Builder
	b.WriteString("\trate_limit {\n\t\tredis {\n\t\t\ttimeout 2s\n")
	for _, line := range redisLines {
		b.WriteString("\t\t\t" + line + "\n")
	}
	b.WriteString(`		}
		failure_mode closed
		zone tls {
			key {http.request.header.X-Key}
			algorithm sliding_log
			events 3
			window 1h
		}
	}
	respond "ok" 200`)
	return b.String()
}

// TestRedisTLS runs Sluice against a redis-server that only speaks TLS: with
// the right CA (tls_ca) limiting works; with a wrong CA every request fails
// closed with 503 and the log names the certificate problem; with a wrong CA
// but insecure_skip_verify limiting works again.
func TestRedisTLS(t *testing.T) {
	srv := redistest.StartTLS(t)
	wrongCA := redistest.NewCA(t, t.TempDir(), "wrong-ca")
	client := newClient(1)
	limited := wantStatuses(3, 1, http.StatusTooManyRequests)

	t.Run("right_ca", func(t *testing.T) {
		caddy := startCaddy(t, caddyConfig{Site: tlsSite("url "+srv.URL(), "tls_ca "+srv.CA.CertFile)})
		got := statuses(t, client, caddy.URL+"/", 4, "X-Key", "right")
		if !slices.Equal(got, limited) {
			t.Errorf("right CA: got statuses %v, want %v", got, limited)
		}
	})

	t.Run("wrong_ca", func(t *testing.T) {
		caddy := startCaddy(t, caddyConfig{Site: tlsSite("url "+srv.URL(), "tls_ca "+wrongCA.CertFile)})
		got := statuses(t, client, caddy.URL+"/", 4, "X-Key", "wrong")
		if want := wantStatuses(0, 4, http.StatusServiceUnavailable); !slices.Equal(got, want) {
			t.Errorf("wrong CA: got statuses %v, want %v", got, want)
		}
		// The failure is logged as it happens, so it is in the log already;
		// the bounded poll only covers the log pipe's delay.
		var log string
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			log = caddy.Log.String()
			if mentionsCertificate(log) {
				return
			}
		}
		t.Errorf("wrong CA: caddy log does not mention the certificate error (x509 / unknown authority); log tail:\n%s", tail(log, 3000))
	})

	t.Run("wrong_ca_insecure_skip_verify", func(t *testing.T) {
		caddy := startCaddy(t, caddyConfig{Site: tlsSite("url "+srv.URL(), "tls_ca "+wrongCA.CertFile, "tls insecure_skip_verify")})
		got := statuses(t, client, caddy.URL+"/", 4, "X-Key", "insecure")
		if !slices.Equal(got, limited) {
			t.Errorf("wrong CA with insecure_skip_verify: got statuses %v, want %v", got, limited)
		}
	})

	// The counts above went to the TLS server: one key per Caddy that reached it.
	n, err := limitKeys(t.Context(), srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("TLS server holds %d keys, want 2 (right and insecure; the wrong-CA Caddy never reached it)", n)
	}
}

func mentionsCertificate(log string) bool {
	return strings.Contains(log, "certificate signed by unknown authority") ||
		strings.Contains(log, "x509:")
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("...%s", s[len(s)-n:])
}
