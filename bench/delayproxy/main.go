// Command delayproxy is bench/run.sh's stand-in for a network between
// Caddy and Redis: a TCP proxy on loopback that holds every chunk of bytes
// for a fixed delay in each direction before passing it on, so a round
// trip through it costs about twice the delay while pipelined traffic
// keeps flowing (a chunk read while earlier ones wait is delayed from the
// time it was read, not queued behind their delay). No netem needed.
//
//	delayproxy -listen 127.0.0.1:7001 -upstream 127.0.0.1:6379 -delay 250us
//
// The wait is a nanosleep system call, not time.Sleep: Go's timers round a
// sub-millisecond sleep up to the next millisecond when the process is
// otherwise idle, which would make every round trip 2 ms.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"syscall"
	"time"
)

type chunk struct {
	b   []byte
	due time.Time
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := flag.String("upstream", "", "address to forward to (host:port)")
	delay := flag.Duration("delay", 250*time.Microsecond, "delay of each direction")
	flag.Parse()
	if *upstream == "" {
		fmt.Fprintln(os.Stderr, "delayproxy: -upstream is required")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("delayproxy: %v", err)
	}
	log.Printf("delayproxy: %s -> %s, %s each way", ln.Addr(), *upstream, *delay)
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatalf("delayproxy: accept: %v", err)
		}
		go serve(c, *upstream, *delay)
	}
}

func serve(client net.Conn, upstream string, delay time.Duration) {
	server, err := net.Dial("tcp", upstream)
	if err != nil {
		log.Printf("delayproxy: dial %s: %v", upstream, err)
		client.Close()
		return
	}
	for _, c := range []net.Conn{client, server} {
		if t, ok := c.(*net.TCPConn); ok {
			_ = t.SetNoDelay(true)
		}
	}
	done := make(chan struct{}, 2)
	go func() { pipe(server, client, delay); done <- struct{}{} }()
	go func() { pipe(client, server, delay); done <- struct{}{} }()
	<-done
	<-done
	client.Close()
	server.Close()
}

// pipe copies src to dst, each chunk delay after it was read.
func pipe(dst, src net.Conn, delay time.Duration) {
	ch := make(chan chunk, 4096)
	go func() {
		defer close(ch)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for c := range ch {
		if failed {
			continue // drain, so the reader ends
		}
		sleepUntil(c.due)
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			src.Close()
		}
	}
	if t, ok := dst.(*net.TCPConn); ok {
		_ = t.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(d.Nanoseconds())
		if err := syscall.Nanosleep(&ts, nil); err == nil {
			return
		}
	}
}
