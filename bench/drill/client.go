package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// client is a lean HTTP/1.1 client for the arrivals: one pool of
// keep-alive connections per Caddy, a request on an idle connection or a
// new one, the client's deadline as the connection's (a request past it
// closes its connection, as a client that gives up does). At ten times
// the capacity the drill sends over 5,000 requests a second on a 2-core
// machine it shares with Caddy: net/http's Transport (two goroutines per
// connection, a hand-off per request) cost it enough CPU that requests
// timed out in the drill, not in Caddy.
type client struct {
	pools []*pool
}

type pool struct {
	addr string
	reqs [2][]byte // the request, bulk and critical
	mu   sync.Mutex
	idle []*clientConn
}

type clientConn struct {
	c  net.Conn
	br *bufio.Reader
}

func newClient(urls []string) *client {
	c := &client{}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		check(err)
		base := "GET / HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: sluice-drill\r\n"
		c.pools = append(c.pools, &pool{addr: u.Host, reqs: [2][]byte{
			[]byte(base + "\r\n"),
			[]byte(base + "X-Tier: critical\r\n\r\n"),
		}})
	}
	return c
}

// do sends one request to instance i and returns its status, or 0 when
// no answer came by deadline. A reused connection the server closed
// meanwhile is retried on a new one.
func (c *client) do(i int, critical bool, deadline time.Time) int {
	p := c.pools[i]
	req := p.reqs[0]
	if critical {
		req = p.reqs[1]
	}
	for {
		cc, reused := p.get(deadline)
		if cc == nil {
			return 0
		}
		status, err := cc.round(req, deadline)
		if err == nil {
			if status > 0 {
				p.put(cc)
			}
			return max(status, -status)
		}
		cc.c.Close()
		if !reused || time.Now().After(deadline) || isTimeout(err) {
			return 0
		}
	}
}

// round sends req and reads its answer: its status, negative when the
// connection cannot be used again.
func (cc *clientConn) round(req []byte, deadline time.Time) (int, error) {
	_ = cc.c.SetDeadline(deadline)
	if _, err := cc.c.Write(req); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(cc.br, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		return 0, err
	}
	if res.Close {
		cc.c.Close()
		return -res.StatusCode, nil
	}
	return res.StatusCode, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// get is an idle connection, the latest first (reused), or a new one
// (nil when none could be made by deadline).
func (p *pool) get(deadline time.Time) (cc *clientConn, reused bool) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		cc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return cc, true
	}
	p.mu.Unlock()
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", p.addr)
	if err != nil {
		return nil, false
	}
	return &clientConn{c: c, br: bufio.NewReaderSize(c, 1024)}, false
}

func (p *pool) put(cc *clientConn) {
	p.mu.Lock()
	p.idle = append(p.idle, cc)
	p.mu.Unlock()
}

// close closes the idle connections.
func (c *client) close() {
	for _, p := range c.pools {
		p.mu.Lock()
		for _, cc := range p.idle {
			cc.c.Close()
		}
		p.idle = nil
		p.mu.Unlock()
	}
}
