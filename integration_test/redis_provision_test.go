package integration_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestValidateRedisCredentials: `caddy validate` fails when Redis refuses
// the password, naming the option, and passes with the right one, and
// with a Redis that does not answer (failure_mode covers it at run time).
func TestValidateRedisCredentials(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", "right-secret").Err(); err != nil {
		t.Fatal(err)
	}
	down := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	tests := []struct {
		name, addr, password string
		want                 string // in the output of a failure; "": validates
	}{
		{"wrong password", srv.Addr, "wrong-secret", "redis: password: Redis refused it"},
		{"right password", srv.Addr, "right-secret", ""},
		{"no Redis", down, "wrong-secret", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			redis := "\t\tredis {\n\t\t\turl redis://" + tt.addr + "/0\n\t\t\tpassword " + tt.password + "\n\t\t}\n"
			out, err := caddyValidate(t, drillHandle("/*", "creds", "open", redis))
			if tt.want == "" {
				if err != nil {
					t.Errorf("caddy validate: %v, want success\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("caddy validate: success, want a failure naming %q", tt.want)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("caddy validate output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}
