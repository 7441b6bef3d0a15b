package sluice

import (
	"strings"
	"testing"
)

// TestPoolKeyFollowsEnv: the shared client's key is made of the expanded
// settings, so a changed {env.*} value (a rotated password) takes a new
// client instead of the old one; and braces that are not {env.*} stay.
func TestPoolKeyFollowsEnv(t *testing.T) {
	c := &RedisConfig{URL: "redis://127.0.0.1:6379/0", Password: "p{w}-{env.SLUICE_TEST_POOL_PASSWORD}"}
	keys := make(map[string]string)
	for _, password := range []string{"one", "two", "one"} {
		t.Setenv("SLUICE_TEST_POOL_PASSWORD", password)
		key, err := c.poolKey()
		if err != nil {
			t.Fatal(err)
		}
		if prev, seen := keys[password]; seen && prev != key {
			t.Errorf("password %q: got key %s, want the same as before, %s", password, key, prev)
		}
		keys[password] = key
		opts, err := c.options()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := opts.Password, "p{w}-"+password; got != want {
			t.Errorf("password: got %q, want %q", got, want)
		}
	}
	if keys["one"] == keys["two"] {
		t.Errorf("pool key: got the same for two passwords, %s", keys["one"])
	}
}

// TestEmptyEnvURL: a url whose {env.*} variable is unset fails naming the
// placeholder, so the operator knows which variable to set.
func TestEmptyEnvURL(t *testing.T) {
	t.Setenv("SLUICE_TEST_UNSET_URL", "")
	c := &RedisConfig{URL: "{env.SLUICE_TEST_UNSET_URL}"}
	_, err := c.options()
	if err == nil || !strings.Contains(err.Error(), "{env.SLUICE_TEST_UNSET_URL}") {
		t.Errorf("got error %v, want one naming {env.SLUICE_TEST_UNSET_URL}", err)
	}
}
