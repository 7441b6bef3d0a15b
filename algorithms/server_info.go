package algorithms

// Functions reports whether the store's decisions run as a Redis Function
// (FCALL); false means EVALSHA (a server without Functions, such as Redis
// 6, or RedisOptions.Scripts). Known once Warm or a first call has run.
func (s *RedisStore) Functions() bool { return !s.runner.scripts.Load() }
