package sluice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
)

// adminClient sends the CLI's requests to Caddy's admin API and prints
// their answers.
type adminClient struct {
	address string // as given or found, for messages
	origin  string // scheme and host of request URLs
	tcp     bool   // whether to send Origin, as caddycmd.AdminAPIRequest does
	client  *http.Client
	out     io.Writer
	json    bool
}

// cliTimeout bounds one admin API request of the CLI.
const cliTimeout = 10 * time.Second

// newAdminClient finds the admin API's address as 'caddy stop' does
// (--address, else the admin address of --config, else localhost:2019)
// and returns a client that prints to out.
func newAdminClient(fl caddycmd.Flags, out io.Writer) (*adminClient, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, fmt.Errorf("finding the admin API's address: %w", err)
	}
	return dialAdmin(addr, out, fl.Bool("json"))
}

// dialAdmin returns a client of the admin API at addr, a network address
// as Caddy's admin listen option takes it (host:port, unix//path). Like
// caddycmd.AdminAPIRequest, it dials the address's network and sends an
// Origin to a TCP listener; unlike it, it keeps an error's status, which
// tells an unknown zone (404) from a zone without overrides (409). It
// never follows a redirect: the admin API's only ones come from its mux
// cleaning a path, and following one would change the key (a PUT to
// …/keys//limit would land on the key "limit").
func dialAdmin(addr string, out io.Writer, asJSON bool) (*adminClient, error) {
	na, err := caddy.ParseNetworkAddress(addr)
	if err != nil {
		return nil, fmt.Errorf("admin address %q: %w", addr, err)
	}
	if na.PortRangeSize() > 1 || na.IsFdNetwork() || (!na.IsUnixNetwork() && na.StartPort == 0) {
		return nil, fmt.Errorf("admin address %q: want one host:port or a unix socket (unix//path)", addr)
	}
	c := &adminClient{address: addr, out: out, json: asJSON}
	network, host := na.Network, na.JoinHostPort(0)
	if na.IsUnixNetwork() {
		host, _, _ = strings.Cut(na.Host, "|") // drop the socket's permission bits, as in unix//caddy.sock|0220
		c.origin = "http://127.0.0.1"          // any host: the socket is what is dialed
	} else {
		c.origin, c.tcp = "http://"+host, true
	}
	var dialer net.Dialer
	c.client = &http.Client{
		Timeout: cliTimeout,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, host)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// adminError is an admin API answer of status 300 or more.
type adminError struct {
	Status   int
	Message  string // the API's "error", or its body
	Location string // of a redirect
}

func (e *adminError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	switch {
	case e.Status < 400:
		msg = fmt.Sprintf("redirected to %q, not followed", e.Location)
	case e.Status == http.StatusNotFound && strings.HasPrefix(msg, "not found"):
		msg += " (the running Caddy's rate_limit module may be older than this command)"
	case e.Status == http.StatusNotFound && !strings.Contains(msg, "zone"):
		msg += " (is the rate_limit handler in this Caddy's config?)"
	case e.Status == http.StatusConflict:
		if !strings.Contains(msg, "overrides") {
			msg += " (the zone needs the overrides option)"
		}
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
}

// do sends method path with body as JSON (none when nil), and returns the
// answer's body when its status is below 300, else an *adminError, or an
// error saying the admin API did not answer.
func (c *adminClient) do(method, path string, body any) ([]byte, error) {
	var reqBody io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request: %w", err)
		}
		reqBody = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.origin+path, reqBody)
	if err != nil {
		return nil, fmt.Errorf("making the request: %w", err)
	}
	if c.tcp {
		req.Header.Set("Origin", c.origin)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API at %s did not answer (is Caddy running? see --address): %w", c.address, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the admin API's answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		return nil, &adminError{Status: resp.StatusCode, Message: apiMessage(data), Location: resp.Header.Get("Location")}
	}
	if resp.Header.Get(adminMarkHeader) != adminMarkValue {
		return nil, fmt.Errorf("%s answered HTTP %d without the rate_limit admin API's %s header: not Caddy's admin API with this module (is --address the admin listener?)",
			c.address, resp.StatusCode, adminMarkHeader)
	}
	return data, nil
}

// decode reads body, an answer of the admin API, into v; a body that is
// not v's JSON is not the API's answer.
func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decoding the admin API's answer: %w", err)
	}
	return nil
}

// apiMessage is the "error" of Caddy's JSON error body, or the body.
func apiMessage(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(body))
}

// raw prints an answer's JSON as it came.
func (c *adminClient) raw(body []byte) error {
	if len(body) > 0 && body[len(body)-1] != '\n' {
		body = append(body, '\n')
	}
	_, err := c.out.Write(body)
	return err
}

// say prints a confirmation, except with --json (a 204 has no JSON).
func (c *adminClient) say(format string, args ...any) error {
	if c.json {
		return nil
	}
	_, err := fmt.Fprintf(c.out, format, args...)
	return err
}
