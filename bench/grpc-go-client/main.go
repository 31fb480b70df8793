// A KNI client in Go, as containerd is: times Attach and Detach calls to a running kni over
// grpc-go, so the bench reports what a Go runtime sees without a Node client's own cost in the
// figure. The requests are encoded field by field (protowire) instead of from generated code:
// two strings and a bool do not justify a protoc step in the build.
//
//	grpc-go-client -socket S -pods FILE [-concurrency C]
//	grpc-go-client -probe S      (test/grpc-server.test.ts: kni's gRPC framing against grpc-go)
//
// FILE holds one "sandbox-id netns-path" per line. Every pod is attached, then every pod is
// detached (netns_ending: the bench removes the netns next), C calls at a time; one JSON object
// {"attachMs": [...], "detachMs": [...], "attachWallMs": W, "detachWallMs": W,
// "clientCpuPerAttachMs": {"user": U, "system": S}} goes to stdout.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawCodec sends and receives message bytes as they are: the caller encodes, and the answers
// are only counted, not read.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// Field numbers of proto/kni/runtime/v1/runtime.proto.
func attachRequest(id, netns string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType) // sandbox_id
	b = protowire.AppendString(b, id)
	b = protowire.AppendTag(b, 2, protowire.BytesType) // netns_path
	return protowire.AppendString(b, netns)
}

func detachRequest(id string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType) // sandbox_id
	b = protowire.AppendString(b, id)
	b = protowire.AppendTag(b, 2, protowire.VarintType) // netns_ending
	return protowire.AppendVarint(b, 1)
}

type pod struct{ id, netns string }

// run calls call(i) for every pod, at most c at a time; each call's ms and the wall ms.
func run(n, c int, call func(i int) error) ([]float64, float64, error) {
	ms := make([]float64, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	t0 := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				s := time.Now()
				if err := call(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ms[i] = float64(time.Since(s).Nanoseconds()) / 1e6
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return nil, 0, e.(error)
	}
	return ms, float64(time.Since(t0).Nanoseconds()) / 1e6, nil
}

// probe calls the test server's /test.Probe methods: echoes of many sizes, 100 at once on one
// connection, and a failure whose non-ASCII message must come back as sent.
func probe(socket string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return err
	}
	defer conn.Close()
	echo := func(req []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var res []byte
		if err := conn.Invoke(ctx, "/test.Probe/Echo", &req, &res); err != nil {
			return err
		}
		if string(res) != string(req) {
			return fmt.Errorf("echo of %d bytes came back as %d different bytes", len(req), len(res))
		}
		return nil
	}
	for _, n := range []int{0, 1, 100, 16384, 70000, 2 << 20} {
		if err := echo([]byte(strings.Repeat("k", n))); err != nil {
			return err
		}
	}
	if _, _, err := run(100, 100, func(i int) error { return echo([]byte(fmt.Sprintf("call %d", i))) }); err != nil {
		return err
	}
	msg := "netns «é» 100% gone"
	req := []byte(msg)
	var res []byte
	err = conn.Invoke(context.Background(), "/test.Probe/Fail", &req, &res)
	if st, ok := status.FromError(err); !ok || st.Code() != codes.FailedPrecondition || st.Message() != msg {
		return fmt.Errorf("Fail: want FailedPrecondition %q, got %v", msg, err)
	}
	return nil
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-probe" {
		if err := probe(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("ok")
		return
	}
	socket := flag.String("socket", "", "kni's gRPC socket")
	podsFile := flag.String("pods", "", `file of "sandbox-id netns-path" lines`)
	concurrency := flag.Int("concurrency", 1, "calls at once")
	flag.Parse()
	if *socket == "" || *podsFile == "" || *concurrency < 1 {
		fmt.Fprintln(os.Stderr, "usage: grpc-go-client -socket S -pods FILE [-concurrency C]")
		os.Exit(2)
	}
	f, err := os.Open(*podsFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var pods []pod
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 {
			pods = append(pods, pod{fields[0], fields[1]})
		}
	}
	f.Close()

	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	call := func(method string, req []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var res []byte
		if err := conn.Invoke(ctx, "/kni.runtime.v1.NetworkRuntime/"+method, &req, &res); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		return nil
	}
	// One call first, outside the figures: the connection is made on the first call.
	if err := call("GetNode", nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	attachMs, attachWall, err := run(len(pods), *concurrency, func(i int) error { return call("Attach", attachRequest(pods[i].id, pods[i].netns)) })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	detachMs, detachWall, err := run(len(pods), *concurrency, func(i int) error { return call("Detach", detachRequest(pods[i].id)) })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ms := func(t syscall.Timeval) float64 { return float64(t.Sec)*1e3 + float64(t.Usec)/1e3 }
	n := float64(len(pods))
	// This client's own CPU per attach: what it takes from the daemon on a small machine.
	clientCPU := map[string]float64{"user": (ms(ru1.Utime) - ms(ru0.Utime)) / n, "system": (ms(ru1.Stime) - ms(ru0.Stime)) / n}
	out, _ := json.Marshal(map[string]any{"attachMs": attachMs, "detachMs": detachMs, "attachWallMs": attachWall, "detachWallMs": detachWall, "clientCpuPerAttachMs": clientCPU})
	fmt.Println(string(out))
}
