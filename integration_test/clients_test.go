package integration_test

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// urllib3Client is a Python client that retries with urllib3's own Retry,
// honouring Retry-After, as applications do; it prints, per request, the
// final status, the statuses retried and the seconds it took.
const urllib3Client = `
import json, sys, time, urllib3
from urllib3.util.retry import Retry
url, n = sys.argv[1], int(sys.argv[2])
http = urllib3.PoolManager(retries=Retry(total=5, backoff_factor=0, respect_retry_after_header=True,
                                         status_forcelist=[429], allowed_methods=["GET"]))
out = []
for i in range(n):
    start = time.monotonic()
    r = http.request("GET", url)
    out.append({"status": r.status, "retried": [h.status for h in r.retries.history],
                "seconds": time.monotonic() - start})
print(json.dumps(out))
`

// TestRealClientUrllib3: urllib3's Retry(respect_retry_after_header=True)
// ends every request 200, waiting as long as Retry-After says, never
// sooner: Sluice's Retry-After is honoured by a real client.
func TestRealClientUrllib3(t *testing.T) {
	matrixOnly(t)
	if err := exec.Command("python3", "-c", "import urllib3").Run(); err != nil {
		t.Fatalf("python3 with urllib3 is missing (make servers-deps installs python3-urllib3): %v", err)
	}
	srv := redistest.Start(t)
	caddy := startCaddy(t, caddyConfig{Site: `	rate_limit {
` + exactRedis(srv) + `		zone urllib3 {
			key static
			algorithm fixed_window
			events 2
			window 1s
		}
	}
	respond "ok" 200`})
	out, err := exec.Command("python3", "-c", urllib3Client, caddy.URL+"/", "6").Output()
	if err != nil {
		t.Fatalf("python3 urllib3 client: %v\n%s", err, out)
	}
	var got []struct {
		Status  int
		Retried []int
		Seconds float64
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	retried := 0
	for i, r := range got {
		if r.Status != 200 {
			t.Errorf("request %d: got final status %d, want 200 (%+v)", i, r.Status, r)
		}
		if len(r.Retried) > 0 {
			retried++
			// Retry-After is whole seconds, at least 1, and urllib3 waits it
			if r.Seconds < float64(len(r.Retried)) {
				t.Errorf("request %d: retried %v after %.3fs, sooner than Retry-After (1s each)", i, r.Retried, r.Seconds)
			}
		}
	}
	if retried == 0 {
		t.Errorf("no request was retried: the limit never bit (%+v)", got)
	}
	t.Logf("urllib3: %+v", got)
}
