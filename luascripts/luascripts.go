// Package luascripts holds the Redis Lua scripts, one file per algorithm,
// and composes them into the code that decides a batch of requests: a Redis
// 7 Function library (loaded once per server, then FCALL) and the same code
// as a script for EVALSHA, where FUNCTION is missing. Which algorithms the
// code holds is the caller's to say (Compose): the Redis store names those
// of the algorithm table (algorithms.Specs).
package luascripts

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
)

// files are the scripts: prelude.lua, request.lua, decide.lua,
// quota_lease.lua and call.lua, which every composition holds, and one
// file per algorithm. Each file calls only into those before it.
//
//go:embed *.lua
var files embed.FS

// Algorithm is one algorithm's script: Name is what a request's algorithm
// field says, File the file here that defines algorithms.<Name> (its
// decide, commit and settle). Leases: it leases quota, so the file must
// define its lease_end and grant too, and set lease_taken_at_end and
// lease_at_end exactly when TakenAtEnd and AtEnd say (its Go twin's
// flags: quota_lease.lua and the holder must agree).
type Algorithm struct {
	Name, File                string
	Leases, TakenAtEnd, AtEnd bool
}

// Code is the decide code of a set of algorithms.
type Code struct {
	// Decide is the script that decides a batch of requests in one atomic
	// call (EVAL/EVALSHA): it defines everything, then runs decide_batch.
	Decide string
	// LibraryName is the Function library's name, versioned: "sluice_"
	// and the first 12 hex digits of the code's SHA-1. A library named by
	// its content is never overwritten by another release's code on the
	// same Redis (two releases side by side during a rollout each load
	// their own), and any change to a script is a new name with no bump to
	// forget.
	LibraryName string
	// FunctionName is the Function that decides a batch (FCALL
	// FunctionName numkeys keys... args...), with Decide's keys, arguments
	// and reply. Function names are global across libraries, so it carries
	// the version too.
	FunctionName string
	// Library is the source for FUNCTION LOAD: the algorithms and the
	// dispatcher are defined once at load; each FCALL runs only
	// decide_batch.
	Library string
}

// Compose composes the decide code of algs, in their order: the shared
// prelude, every algorithm's file, the table of the algorithm fields of
// zones with overrides (request.lua's overridable, written out here so
// that reading a field stays one table lookup), the reading of a
// request's string, the deciding of a request (decide.lua) and of a
// leasing one (quota_lease.lua), then the call, decide_batch(keys, argv)
// (call.lua).
func Compose(algs []Algorithm) (Code, error) {
	var b strings.Builder
	if err := add(&b, "prelude.lua"); err != nil {
		return Code{}, err
	}
	for _, a := range algs {
		if err := addAlgorithm(&b, a); err != nil {
			return Code{}, err
		}
	}
	b.WriteString(overridable(algs))
	for _, f := range []string{"request.lua", "decide.lua", "quota_lease.lua", "call.lua"} {
		if err := add(&b, f); err != nil {
			return Code{}, err
		}
	}
	return compose(b.String()), nil
}

// compose names body, the decide code, and wraps it as a script and as a
// library.
func compose(body string) Code {
	sum := sha1.Sum([]byte(body))
	name := "sluice_" + hex.EncodeToString(sum[:6])
	c := Code{LibraryName: name, FunctionName: name + "_decide"}
	c.Decide = body + "\nreturn decide_batch(KEYS, ARGV)\n"
	c.Library = "#!lua name=" + c.LibraryName + "\n" + body +
		"\nredis.register_function('" + c.FunctionName + "', decide_batch)\n"
	return c
}

// add appends the script file to b.
func add(b *strings.Builder, file string) error {
	src, err := files.ReadFile(file)
	if err != nil {
		return fmt.Errorf("composing the decide code: %w", err)
	}
	b.Write(src)
	return nil
}

// addAlgorithm appends a's file to b, once it has checked that the file
// defines algorithms.<a.Name>.
func addAlgorithm(b *strings.Builder, a Algorithm) error {
	src, err := files.ReadFile(a.File)
	if err != nil {
		return fmt.Errorf("composing the decide code: algorithm %s: %w", a.Name, err)
	}
	if !strings.Contains(string(src), "\nalgorithms."+a.Name+" = ") {
		return fmt.Errorf("composing the decide code: %s does not define algorithms.%s", a.File, a.Name)
	}
	if err := checkLease(string(src), a); err != nil {
		return fmt.Errorf("composing the decide code: %w", err)
	}
	b.Write(src)
	return nil
}

// checkLease reports a's file (src) lacking what a leasing algorithm
// defines, or setting its lease flags otherwise than a says.
func checkLease(src string, a Algorithm) error {
	p := "\nalgorithms." + a.Name + "."
	has := func(s string) bool { return strings.Contains(src, s) }
	switch {
	case a.Leases && !(has("\nfunction "+p[1:]+"lease_end(") && has("\nfunction "+p[1:]+"grant(")):
		return fmt.Errorf("%s leases, but %s does not define its lease_end and grant", a.Name, a.File)
	case has(p+"lease_taken_at_end = true") != (a.Leases && a.TakenAtEnd):
		return fmt.Errorf("%s: lease_taken_at_end in %s disagrees with its Go twin", a.Name, a.File)
	case has(p+"lease_at_end = true") != (a.Leases && a.AtEnd):
		return fmt.Errorf("%s: lease_at_end in %s disagrees with its Go twin", a.Name, a.File)
	}
	return nil
}

// overridable is the Lua table of the algorithm fields of zones with
// overrides, each algorithm's name with ":o", for request.lua.
func overridable(algs []Algorithm) string {
	var b strings.Builder
	b.WriteString("\n-- overridable are the algorithm fields of zones with overrides.\nlocal overridable = {\n")
	for _, a := range algs {
		fmt.Fprintf(&b, "  [%q] = algorithms.%s,\n", a.Name+":o", a.Name)
	}
	b.WriteString("}\n")
	return b.String()
}
