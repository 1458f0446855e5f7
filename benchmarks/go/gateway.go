// The Go baseline for benchmarks/gateway (docs/benchmarks.md, "The seed's
// gateway"): net/http's server, a goroutine per connection, whose handler
// makes one blocking GET to the backend and answers "Ok!", as the seed's Go
// gateway did. Same command line as gateway:
//
//	gateway_go --port 8080 --backend-port 8081 [--workers N] [--max-idle-per-host N]
//
// --workers sets GOMAXPROCS (default: one per core, Go's own default).
// The client's Transport keeps --max-idle-per-host idle backend
// connections (default 10000, as many as bench-gateway's most
// connections), as a Go team sizes it for a gateway and as the C++
// gateway's free list keeps every one: net/http's default of 2
// (DefaultMaxIdleConnsPerHost) closed all but 2 of 1,000 concurrent
// requests' connections after each answer, so every request dialed anew
// and the closed ones piled up in TIME_WAIT. --max-idle-per-host 2 is the
// default client again.
// Serves on 127.0.0.1 until SIGINT or SIGTERM. Built by
// benchmarks/meson.build only when a go binary is found.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1")
	backendPort := flag.Int("backend-port", 0, "the backend's port on 127.0.0.1")
	workers := flag.Int("workers", 0, "GOMAXPROCS (default: one per core)")
	maxIdle := flag.Int("max-idle-per-host", 10000, "idle backend connections kept (net/http's default: 2)")
	flag.Parse()
	if *port < 1 || *port > 65535 || *backendPort < 1 || *backendPort > 65535 || *workers < 0 || *workers > 1024 {
		fmt.Fprintln(os.Stderr, "gateway_go: --port and --backend-port need 1 to 65535, --workers 1 to 1024")
		os.Exit(2)
	}
	if *maxIdle < 1 || *maxIdle > 100000 {
		fmt.Fprintln(os.Stderr, "gateway_go: --max-idle-per-host needs 1 to 100000, not", *maxIdle)
		os.Exit(2)
	}
	if *workers > 0 {
		runtime.GOMAXPROCS(*workers)
	}
	backend := fmt.Sprintf("http://127.0.0.1:%d/", *backendPort)
	// The C++ gateway's timeouts: 5 s to connect and to read.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = *maxIdle // the total, 100 by default, bounds the per-host figure too
	transport.MaxIdleConnsPerHost = *maxIdle
	client := &http.Client{Timeout: 10 * time.Second, Transport: transport}

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		answer, err := client.Get(backend)
		if err != nil {
			http.Error(w, "backend failed: "+err.Error(), http.StatusBadGateway)
			return
		}
		io.Copy(io.Discard, answer.Body)
		answer.Body.Close()
		if answer.StatusCode != http.StatusOK {
			http.Error(w, fmt.Sprintf("backend answered %d", answer.StatusCode), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "Ok!")
	})

	// net.Listen uses the kernel's maximum backlog (net.core.somaxconn).
	listener, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway_go:", err)
		os.Exit(1)
	}
	server := &http.Server{Handler: mux}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		server.Shutdown(ctx)
	}()
	if err := server.Serve(listener); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "gateway_go:", err)
		os.Exit(1)
	}
}
