package sluice

// adaptiveZone is what an adaptive zone sheds with: its limiters (one per
// key value) and how it answers.
type adaptiveZone struct{}
