// Package peer holds Go's side of the host comparison (`cargo xtask bench`, issue 14): the
// same three operations the libuthread criterion bench measures, on goroutines. Run with
// GOMAXPROCS=1 so that, like libuthread on one vCPU, every switch is a user-level one on one
// OS thread:
//
//	GOMAXPROCS=1 go test -run '^$' -bench . -count 5
//
// One op of each benchmark matches one criterion iteration:
//   - GoschedRoundTrip: two goroutines take turns through runtime.Gosched; one op is a round
//     trip (two switches), like libuthread_yield_round_trip;
//   - ChannelRoundTrip: a value sent on an unbuffered channel to an echo goroutine and received
//     back on another, like libuthread_channel_round_trip;
//   - SpawnWait: a goroutine that does nothing started and waited for through a
//     sync.WaitGroup, like libuthread_spawn_join.
package peer

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func BenchmarkGoschedRoundTrip(b *testing.B) {
	var stop atomic.Bool
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for !stop.Load() {
			runtime.Gosched()
		}
	}()
	runtime.Gosched() // let it start
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.Gosched()
	}
	b.StopTimer()
	stop.Store(true)
	done.Wait()
}

func BenchmarkChannelRoundTrip(b *testing.B) {
	ping := make(chan int)
	pong := make(chan int)
	go func() {
		for v := range ping {
			pong <- v
		}
		close(pong)
	}()
	ping <- 0
	<-pong // the echo goroutine is running
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ping <- i
		<-pong
	}
	b.StopTimer()
	close(ping)
	<-pong
}

var sink int

func BenchmarkSpawnWait(b *testing.B) {
	var wg sync.WaitGroup
	for i := 0; i < b.N; i++ {
		wg.Add(1)
		go func() {
			sink++
			wg.Done()
		}()
		wg.Wait()
	}
}
