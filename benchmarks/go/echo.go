// The Go baseline for echo_server (docs/benchmarks.md, "Echo server"): one
// goroutine per connection on the net package, whose netpoller is what
// weft::io is after. Same command line and output as echo_server:
//
//	echo_go --port 0 [--workers N]   # prints "listening on 127.0.0.1:PORT"
//
// --workers sets GOMAXPROCS (default: one per core, Go's own default).
// Serves until SIGINT or SIGTERM, then closes every connection and exits 0.
// Built by benchmarks/meson.build only when a go binary is found.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
)

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1; 0 picks a free one")
	workers := flag.Int("workers", 0, "GOMAXPROCS (default: one per core)")
	flag.Parse()
	if *port < 0 || *port > 65535 || *workers < 0 || *workers > 1024 {
		fmt.Fprintln(os.Stderr, "echo_go: --port needs 0 to 65535, --workers 1 to 1024")
		os.Exit(2)
	}
	if *workers > 0 {
		runtime.GOMAXPROCS(*workers)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)

	// net.Listen uses the kernel's maximum backlog (net.core.somaxconn), as
	// echo_server's 4096 does.
	listener, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo_go:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on 127.0.0.1:%d\n", listener.Addr().(*net.TCPAddr).Port)

	var lock sync.Mutex
	conns := map[net.Conn]struct{}{}
	stopping := false
	var live sync.WaitGroup
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return // closed by the stop below
			}
			lock.Lock()
			if stopping {
				lock.Unlock()
				conn.Close()
				continue
			}
			conns[conn] = struct{}{}
			live.Add(1)
			lock.Unlock()
			// TCP_NODELAY is Go's default for TCP connections.
			go func() {
				defer live.Done()
				serve(conn)
				lock.Lock()
				delete(conns, conn)
				lock.Unlock()
				conn.Close()
			}()
		}
	}()

	<-stop
	listener.Close()
	lock.Lock()
	stopping = true
	for conn := range conns {
		// Wakes the blocked Read (closing twice is harmless in Go).
		conn.Close()
	}
	lock.Unlock()
	live.Wait()
}

// The connection: plain blocking code, as in echo_server's thread mode; Go
// parks the goroutine in its netpoller at each would-block.
func serve(conn net.Conn) {
	buffer := make([]byte, 4096)
	for {
		n, err := conn.Read(buffer)
		if n > 0 {
			if _, werr := conn.Write(buffer[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
