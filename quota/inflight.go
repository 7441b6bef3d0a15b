package quota

import "github.com/sluicehq/caddy-sluice/algorithms"

// Units in flight: what this instance's grants of a key asked and the
// store has not answered yet (quotaKey.inFlight), so that requests that
// ask while a grant is out lack only what it and the units left do not
// cover.

// asked adds asks[i] to the units in flight of each request's key (of
// hash hs[i]; its shard locked): a grant asked, until its answer
// (answered; quotaKey.inFlight). A key not tracked is skipped.
func (q *Leases) asked(reqs []algorithms.Request, hs []uint64, asks []int64) {
	for i := range reqs {
		if k := q.shards[q.shardIn(hs[i])].find(reqs[i].Key); k != nil {
			k.inFlight += asks[i]
		}
	}
}

// answered takes the units sent asked (a grant's call, answered or
// failed, or a renewal not sent) out of their keys' units in flight,
// under their shards' locks, never below 0 (a key dropped and tracked
// again meanwhile started over).
func (q *Leases) answered(sent []algorithms.Request) {
	for i := range sent {
		sh := &q.shards[q.shardOf(sent[i].Key)]
		sh.mu.Lock()
		if k := sh.find(sent[i].Key); k != nil {
			k.inFlight = max(0, k.inFlight-sent[i].Quota.Units)
		}
		sh.mu.Unlock()
	}
}
