package algorithms

// UnannouncedError is the error of a Store's Reset that reset the key
// (its state deleted, its ban lifted) but could not tell the other
// instances sharing the store, which then keep their cached denials of it
// until these end. The reset is done: callers answer it as done, with the
// error as a warning.
type UnannouncedError struct {
	// Err says what kept the reset from being announced, and what is
	// missing (e.g. the Redis user's permission of the reset channel).
	Err error
}

func (e *UnannouncedError) Error() string { return e.Err.Error() }

func (e *UnannouncedError) Unwrap() error { return e.Err }
