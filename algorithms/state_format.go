package algorithms

import "strings"

// StateSuffix is what a store key of algorithm a ends with after its hash
// tag: the version of the state format a's Redis code reads and writes
// (its table entry's StateSuffix, table.go), or "" for the format of the
// first release.
//
// A new format is a new key, never a rewrite of the old one: during a
// rolling upgrade the previous release, running beside this one on the
// same Redis, keeps reading and writing its own keys in its own format,
// and neither misreads the other's state. What that costs: until the
// rollout ends, each release counts its own requests, so a key can see up
// to its limit once per release running (and a fresh start of its state
// when it moves to the new one). The table says what each version holds.
//
// A version is never reused across algorithms: a zone whose algorithm
// changes (on a reload, or in a fleet mid-rollout) then finds no state of
// another type at its key.
//
// The keys beside a key's state (its override, its ban) hang off
// StateBase, not the state key: they are configuration and sanctions, not
// state, and outlive a change of format.
func StateSuffix(a Algorithm) string {
	if s, ok := specs[a]; ok {
		return s.StateSuffix
	}
	return ""
}

// StateBase is key without its state format's suffix: a trailing ":v"
// and digits, the form of every StateSuffix, past and future (decide.lua's
// state_base is the twin). A key's override and ban are named after it
// (redisstore.OverrideKey, BanKey), so that a new format of the state
// finds them where the previous one left them.
func StateBase(key string) string {
	i := strings.LastIndex(key, ":v")
	if i < 0 || i+2 == len(key) {
		return key
	}
	for _, c := range []byte(key[i+2:]) {
		if c < '0' || c > '9' {
			return key
		}
	}
	return key[:i]
}
