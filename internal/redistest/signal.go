package redistest

import (
	"errors"
	"os"
	"syscall"
)

// errNotRunning is returned by Signal when the server is not running.
var errNotRunning = errors.New("redistest: redis-server is not running")

// Signal sends sig to the running redis-server, e.g. syscall.SIGSTOP to
// freeze it and syscall.SIGCONT to let it go on. A server left stopped is
// still killed at the test's end: SIGKILL ends a stopped process too.
func (s *Server) Signal(sig os.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errNotRunning
	}
	return s.cmd.Process.Signal(sig)
}

// Kill ends the server with SIGKILL, as a crash would (no shutdown, no
// goodbye to clients), and waits until it has exited, so its port is closed
// when Kill returns. Restart starts it again, empty. It is safe to call
// twice.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pid is the process id of the running redis-server, 0 when none runs.
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}
