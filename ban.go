package sluice

import (
	"fmt"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// validateBan checks a zone's ban: none, or 1s to 366 days.
func validateBan(ban time.Duration) error {
	if ban != 0 && (ban < algorithms.MinBan || ban > algorithms.MaxBan) {
		return fmt.Errorf("ban: want from %v to %v, got %v", algorithms.MinBan, algorithms.MaxBan, ban)
	}
	return nil
}

// banSeconds is the zone's ban in whole seconds, rounded up (0: none);
// validateBan bounds it well within an int32.
// Under a handler's dry_run (handlerDryRun), which never rejects, it is
// 0: nothing bans.
func (z *Zone) banSeconds(handlerDryRun bool) int32 {
	if handlerDryRun {
		return 0
	}
	return int32(ceilSeconds(time.Duration(z.Ban)))
}
