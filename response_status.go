package sluice

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// A response's status, as settlement needs it: the status a response
// ends with, recorded as it passes through (statusRecorder), and the sets
// of statuses count_status lists (statusSet), which settle.go compares;
// and the status of a request whose client left (statusClientClosed).

// statusClientClosed is what a request whose client left gets in the
// access log (nginx's and reverse_proxy's 499, client closed request).
const statusClientClosed = 499

// statusSet is a set of HTTP status codes 100 to 599.
type statusSet [10]uint64

func (s *statusSet) add(code int) { s[code/64] |= 1 << (code % 64) }
func (s *statusSet) has(code int) bool {
	return code >= 0 && code < 640 && s[code/64]&(1<<(code%64)) != 0
}
func (s *statusSet) empty() bool { return *s == statusSet{} }
func (s *statusSet) addRange(low, high int) {
	for c := low; c <= high; c++ {
		s.add(c)
	}
}

// parseStatuses reads count_status values: codes 100 to 599, or classes
// 1xx to 5xx.
func parseStatuses(values []string) (statusSet, error) {
	var set statusSet
	for _, v := range values {
		if len(v) == 3 && strings.HasSuffix(strings.ToLower(v), "xx") && v[0] >= '1' && v[0] <= '5' {
			class := int(v[0]-'0') * 100
			set.addRange(class, class+99)
			continue
		}
		code, err := strconv.Atoi(v)
		if err != nil || code < 100 || code > 599 {
			return set, fmt.Errorf("count_status: want status codes 100 to 599 or classes 1xx to 5xx, got %q", v)
		}
		set.add(code)
	}
	return set, nil
}

// statusRecorder notes the status of the response it passes through,
// without buffering: writes and flushes go straight on.
type statusRecorder struct {
	*caddyhttp.ResponseWriterWrapper
	status int // the final status written; 0 until then
}

// errPanicked stands for the error of a handler that panicked: its status
// is what it wrote, else 500.
var errPanicked = errors.New("handler panicked")

// WriteHeader notes the final status: 2xx to 5xx, or 101 (an upgrade, such
// as a WebSocket); other 1xx are interim.
func (w *statusRecorder) WriteHeader(status int) {
	if w.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		w.status = status
	}
	w.ResponseWriterWrapper.WriteHeader(status)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.Write(b)
}

func (w *statusRecorder) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.ReadFrom(r)
}

// Flush sends what is buffered (an implicit 200 if no status was written).
func (w *statusRecorder) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriterWrapper.ResponseWriter).Flush()
}

// final is the response's status, once the next handler returned err:
// what was written, else the error's status (Caddy's error routes answer
// with it), else 200, as net/http sends for a handler that wrote nothing.
func (w *statusRecorder) final(err error) int {
	if w.status != 0 {
		return w.status
	}
	if err == nil {
		return http.StatusOK
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return http.StatusInternalServerError
}

// Interface guards
var (
	_ http.ResponseWriter = (*statusRecorder)(nil)
	_ http.Flusher        = (*statusRecorder)(nil)
)
