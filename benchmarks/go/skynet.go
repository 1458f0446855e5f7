// Skynet (github.com/atemerev/skynet), Go's peer of benchmarks/skynet.cpp
// (scripts/bench-peers): each node starts 10 goroutines and sums what they
// send on one channel it shares with them, down to 1,000,000 leaves.
//
//	GOMAXPROCS=2 skynet_go
//
// Prints one JSON object: {"ms": ..., "sum": ..., "ok": ..., "procs": ...};
// exits 1 if the sum is wrong.
package main

import (
	"fmt"
	"os"
	"runtime"
	"time"
)

func skynet(c chan<- int64, num, size, div int64) {
	if size == 1 {
		c <- num
		return
	}
	rc := make(chan int64)
	for i := int64(0); i < div; i++ {
		go skynet(rc, num+i*(size/div), size/div, div)
	}
	var sum int64
	for i := int64(0); i < div; i++ {
		sum += <-rc
	}
	c <- sum
}

func main() {
	const leaves = 1000000
	const want = int64(leaves) * (leaves - 1) / 2
	t0 := time.Now()
	c := make(chan int64)
	go skynet(c, 0, leaves, 10)
	sum := <-c
	elapsed := time.Since(t0)
	fmt.Printf("{\"ms\": %.1f, \"sum\": %d, \"ok\": %t, \"procs\": %d}\n",
		float64(elapsed.Microseconds())/1000, sum, sum == want, runtime.GOMAXPROCS(0))
	if sum != want {
		os.Exit(1)
	}
}
